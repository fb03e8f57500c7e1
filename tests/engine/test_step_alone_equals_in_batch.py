"""A step's outcome alone equals its outcome inside a batch, for every step state.

There is one step executor (``engine/steps.py``): ``execute_step`` is a batch of one,
``execute_steps`` a batch of many. The table is the net over what a batch shares (one read, one
re-check session, one fence, one submit, one accepted write): the same world is built twice, one
situation is put on the first plan's release (a step state, a stale plan, an alias guard that
stopped answering, the gate turned off, no free GPU), and the looked-at step is that release,
or the acquire behind it run while the release is as put (the prerequisite rule: it waits or
is cancelled) or after the releases ran. One world runs the step and its
order's other steps one at a time, the other as one batch; the step's outcome, every step row,
every status and the core's mutations must be the same — on SQLite, on PostgreSQL and on the
in-memory store.
"""

from __future__ import annotations

from typing import Any

import pytest

from gps_dagster.domain.pool import FaultSpec
from gps_dagster.domain.schedules import load_schedule
from tests.engine.test_execute_steps import BOUNDARY, Lane, opened, schedule_doc, snapshot, two_urls

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
SITUATIONS = (*STATES, "stale_plan", "alias_blocked", "gate_off", "no_capacity")
N = 3


def put(lane: Lane, situation: str) -> None:
    """``situation`` on the first plan's release (``d0-a``), after its plan opened."""
    release = lane.plans[0].release_steps[0].step_id
    if situation in STATES and situation != "pending":
        failed = situation in ("failed", "cancelled")
        moved = lane.store.update_action(
            release,
            expect=("pending",),
            now=BOUNDARY,
            state=situation,
            reason="put_by_the_test" if failed else None,
        )
        assert moved
    elif situation == "stale_plan":  # an edit since the plan opened (R-MODEL-8)
        lane.store.apply_schedule(load_schedule(schedule_doc(0, priority=20)), now=BOUNDARY)
    elif situation == "alias_blocked":  # the guard stopped answering since the preflight
        lane.pool.inject_fault(FaultSpec(effect="alias_guard_unwired", deploy="d0-a"))
    elif situation == "gate_off":  # the fence refuses: the step stays, asked again later
        lane.store.set_gate("off", now=BOUNDARY)


def outcome(lane: Lane, step: str, batch: list[str], *, alone: bool) -> Any:
    done = (
        [lane.engine.execute_step(i) for i in batch] if alone else lane.engine.execute_steps(batch)
    )
    got = next(o for o in done if o.step_id == step)
    return (got.deploy_id, got.state, got.phase, got.reason)


RELEASE = {  # what the table means for the release itself
    "pending": ("accepted", None),
    "accepted": ("accepted", None),
    "converged": ("converged", None),
    "stale_plan": ("superseded", "schedule_version_changed"),
    "alias_blocked": ("failed", "alias_guard_unwired"),
    "gate_off": ("pending", "gate_not_enforce"),
    "no_capacity": ("accepted", None),
}
WAITING = {  # the acquire run while its release is as put (not run): waiting, or cancelled
    "pending": "pending",
    "capacity_wait": "pending",
    "submitting": "pending",
    "failed": "cancelled",
    "cancelled": "cancelled",
    "stale_plan": "superseded",
    "alias_blocked": "pending",
    "gate_off": "pending",
    "no_capacity": "pending",
}
ACQUIRE = {  # and for the acquire behind it, its releases run first
    "pending": "accepted",
    "failed": "cancelled",
    "cancelled": "cancelled",
    "stale_plan": "superseded",
    "alias_blocked": "cancelled",
    "gate_off": "pending",
    "no_capacity": "capacity_wait",
}


@pytest.mark.parametrize("situation", SITUATIONS)
@pytest.mark.parametrize("role", ["release", "acquire_waiting", "acquire_behind_it"])
def test_a_steps_outcome_alone_equals_its_outcome_in_a_batch(
    two_urls: tuple[str, str], role: str, situation: str
) -> None:
    spare = 0 if situation == "no_capacity" else N
    worlds = [opened(url, N, spare=spare) for url in two_urls]
    for lane in worlds:
        put(lane, situation)
    results = []
    for lane, alone in zip(worlds, (True, False), strict=True):
        plans = lane.plans
        if role == "release":
            batch = [s.step_id for p in plans for s in p.release_steps]
        else:  # (behind it: the releases first, as a batch run's ops) the acquires looked at
            releases = [s.step_id for p in plans for s in p.release_steps]
            if role == "acquire_behind_it":
                outcome(lane, releases[0], releases, alone=alone)
            batch = [s.step_id for p in plans for s in p.acquire_steps]
        results.append(outcome(lane, batch[0], batch, alone=alone))
    one, together = results
    assert together == one, (role, situation)
    assert snapshot(worlds[1]) == snapshot(worlds[0])
    if role == "release" and situation in RELEASE:
        state, reason = RELEASE[situation]
        assert (one[1], one[3]) == (state, reason), (situation, one)
    if role == "acquire_behind_it":
        assert one[1] == ACQUIRE.get(situation, "accepted"), (situation, one)
    if role == "acquire_waiting":
        assert one[1] == WAITING.get(situation, "accepted"), (situation, one)
