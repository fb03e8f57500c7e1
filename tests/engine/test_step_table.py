"""A step's outcome alone equals its outcome inside a batch, for every step state (issue 22 §1).

The step decisions are written once (``domain/step_rules.py``: may it move yet, the fence's
re-checks, forward-only, the alias refusal) and every lane asks them. This table is the net
over the lanes: the same world is built twice, one step is put in each state a step can be in,
either the step itself or the release its acquire waits on (the prerequisite rule); one world
runs the step and its order's other steps one at a time (``execute_step``), the other as one
batch (``execute_steps``). The step's outcome, every step row, every status and the core's mutations
must be the same — on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from gps_dagster.engine import PlanRef
from tests.engine.test_execute_steps import BOUNDARY, Lane, opened, snapshot, two_urls

__all__ = ["two_urls"]  # the fixture, imported for this module

STATES = (
    "pending",
    "capacity_wait",
    "submitting",
    "accepted",
    "converged",
    "failed",
    "cancelled",
    "superseded",
)
N = 3


def put(lane: Lane, step_id: str, state: str) -> None:
    moved = lane.store.update_action(
        step_id,
        expect=("pending",),
        now=BOUNDARY,
        state=state,
        reason=None if state not in ("failed", "cancelled") else "put_by_the_test",
    )
    assert moved


def subject(lane: Lane, role: str) -> tuple[str, list[str]]:
    """The step looked at, and the batch it runs inside (its order's steps of every plan)."""
    plans: list[PlanRef] = lane.plans
    order = "release" if role == "release" else "acquire"
    steps = [
        s.step_id
        for p in plans
        for s in (p.release_steps if order == "release" else p.acquire_steps)
    ]
    return steps[0], steps


def outcome(lane: Lane, step: str, batch: list[str], *, alone: bool) -> Any:
    """The batch's steps one at a time (``alone``) or together; the outcome of ``step``."""
    done = (
        [lane.engine.execute_step(i) for i in batch] if alone else lane.engine.execute_steps(batch)
    )
    got = next(o for o in done if o.step_id == step)
    return (got.deploy_id, got.state, got.phase, got.reason)


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("role", ["release", "acquire_behind_it"])
def test_a_steps_outcome_alone_equals_its_outcome_in_a_batch(
    two_urls: tuple[str, str], role: str, state: str
) -> None:
    worlds = [opened(url, N, spare=N) for url in two_urls]
    for lane in worlds:
        put(lane, lane.plans[0].release_steps[0].step_id, state)
    results = []
    for lane, alone in zip(worlds, (True, False), strict=True):
        step, batch = subject(lane, role)
        results.append(outcome(lane, step, batch, alone=alone))
    one, together = results
    assert together == one, (role, state)
    assert snapshot(worlds[1]) == snapshot(worlds[0])
    # and the table means something: what the first plan's acquire does behind its release
    if role == "acquire_behind_it":
        expected = {
            "pending": "pending",
            "capacity_wait": "pending",
            "submitting": "pending",
            "failed": "cancelled",
            "cancelled": "cancelled",
        }.get(state, "accepted")
        assert one[1] == expected, (state, one)
