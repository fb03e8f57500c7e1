"""Tests that catch the mutations the suite missed (issue 9 §4).

Each test names the mutation it kills; each was run against its mutation
(applied by hand, see the test fail, reverted):

* the fence's claim re-check removed;
* the fence's ``enabled`` re-check removed (and a disable racing the fence);
* the deadline of a submit whose answer never comes removed;
* the unschedulable grace ignored;
* ``_cancel_dependents`` (``Endings._dependents``) removed.

(``plans.supersede`` disabled is killed by ``test_atomic_endings.py::test_2_6_...``.)
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from gps_dagster.domain.pool import FaultSpec
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import DeployState
from tests.engine.harness import (
    A,
    B,
    C,
    World,
    a_running_pool,
    local,
    make_world,
    op_triples,
    run_for,
    seed_schedule,
)

EVENING = local("2026-10-19T17:59:30")


def opened(w: World) -> Any:
    w.tick(30)
    (plan,) = w.engine.reconcile().plans  # 18:00: opened, nothing executed (the Dagster path)
    return plan


def other_schedule(w: World) -> None:
    doc = {
        "name": "other",
        "timezone": "Asia/Ho_Chi_Minh",
        "windows": [],
        "targets": [{"model_deploy_id": C, "default_state": "running"}],
    }
    w.store.apply_schedule(load_schedule(doc), now=w.clock.now())


class Racing:
    """The pool, with ``race()`` run once right after the alias-guard read: between the step's
    own checks and its fence transaction (a writer committing in that window)."""

    def __init__(self, pool: Any, race: Any) -> None:
        self._pool, self._race = pool, race
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._pool, name)
        if name != "alias_guard":
            return real

        def call(*args: Any, **kw: Any) -> Any:
            out = real(*args, **kw)
            if not self.raced:
                self.raced = True
                self._race()
            return out

        return call


def test_4_fence_claim_recheck_a_step_whose_target_was_claimed_away_is_not_submitted(
    db_url: str,
) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    plan = opened(w)
    other_schedule(w)
    # the claim moves to "other" (version and enabled unchanged)
    with w.store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE "
                + ("gps." if db_url.startswith("postgresql") else "")
                + "target_claims SET schedule_name = 'other' WHERE deploy_id = :d"
            ),
            {"d": A},
        )
    out = w.engine.execute_step(plan.release_steps[0].step_id)
    assert (out.state, out.reason) == ("superseded", "claim_lost")
    assert op_triples(w) == [] and w.deploy(A).state is DeployState.READY


def test_4_fence_enabled_recheck_a_disable_racing_the_fence_submits_nothing(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    plan = opened(w)
    table = ("gps." if db_url.startswith("postgresql") else "") + "schedules"

    def disable() -> None:  # committed after the step's own checks, before its fence
        with w.store.engine.begin() as conn:
            conn.execute(
                sa.text(f"UPDATE {table} SET enabled = false WHERE name = :n"), {"n": w.spec.name}
            )

    core = Racing(w.pool, disable)
    engine = Engine(w.store, core, w.clock, EngineConfig(holder="engine-1"))  # type: ignore[arg-type]
    out = engine.execute_step(plan.release_steps[0].step_id)
    assert core.raced
    assert (out.state, out.reason) == ("superseded", "schedule_disabled")
    assert op_triples(w) == []


def test_4_fence_version_recheck_an_edit_racing_the_fence_submits_nothing(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    plan = opened(w)
    doc = seed_schedule()
    doc["enabled"] = False
    core = Racing(w.pool, lambda: w.apply(doc))  # the disable through the API bumps the version
    engine = Engine(w.store, core, w.clock, EngineConfig(holder="engine-1"))  # type: ignore[arg-type]
    out = engine.execute_step(plan.release_steps[0].step_id)
    assert core.raced and (out.state, out.reason) == ("superseded", "schedule_version_changed")
    assert op_triples(w) == []


def test_4_submit_deadline_a_stop_whose_answer_never_comes_ends_stop_timeout(
    sqlite_url: str,
) -> None:
    w = make_world(
        sqlite_url, pool=a_running_pool(), start=EVENING, config=EngineConfig(stop_timeout_s=300)
    )
    w.pool.inject_fault(FaultSpec(effect="lose_response", op="stop", deploy=A, times=100_000))
    w.run_until(local("2026-10-19T18:04"))
    (stop,) = w.store.list_actions(deploy_id=A)
    assert stop.state == "submitting"  # resubmitted with the same key, still no answer
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("stop_timeout", "core_unreadable"), (st.phase, st.reason)
    # submitted 18:00 + 300 s
    assert local("2026-10-19T18:04:30") <= st.phase_since <= local("2026-10-19T18:05")
    assert w.store.get_action(stop.id).state == "failed"  # type: ignore[union-attr]
    # B not started blind
    assert [a.state for a in w.store.list_actions(deploy_id=B)] == ["cancelled"]
    assert {k for _, k, key in op_triples(w)} == {"stop"} and len(
        op_triples(w)
    ) == 1  # one key, one mutation


def test_4_unschedulable_grace_a_briefly_pending_replica_is_not_start_unschedulable(
    sqlite_url: str,
) -> None:
    w = make_world(
        sqlite_url,
        pool=a_running_pool(),
        start=EVENING,
        config=EngineConfig(unschedulable_grace_s=120),
    )
    w.pool.inject_fault(FaultSpec(effect="unschedulable", deploy=B))
    for _ in range(20):  # until B's start is accepted (A stopped, GPUs published)
        w.tick(30)
        if w.status(B).phase == "awaiting_ready":
            break
    assert w.status(B).phase == "awaiting_ready" and w.deploy(B).unschedulable
    run_for(w, 60)  # unschedulable for 60 s < the 120 s grace
    assert w.status(B).phase == "awaiting_ready"
    w.pool.clear_faults()  # the pods get placed
    run_for(w, 300)
    assert w.status(B).phase == "converged", w.status(B).phase
    assert w.deploy(B).state is DeployState.READY


def test_4_cancel_dependents_a_failed_release_cancels_its_acquire_at_once(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    plan = opened(w)
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy=A, error="permanent"))
    # the release op; nobody runs the acquire op
    out = w.engine.execute_step(plan.release_steps[0].step_id)
    assert out.state == "failed"
    (start_b,) = w.store.list_actions(deploy_id=B)
    assert (start_b.state, start_b.reason) == ("cancelled", out.reason)
    b = w.status(B)
    assert (b.phase, b.reason) == (out.phase, out.reason) and f"{B} not touched" in (b.fix or "")
    assert w.store.get_transition(plan.transition_id).state == "failed"  # type: ignore[union-attr]
