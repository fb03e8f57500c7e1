"""Schedule edits mid-transition (SPEC R-MODEL-8, R-PASS-7): a version bump fences out stale steps.

The engine snapshots (schedule, version) when it opens a plan and every submit
re-checks the version in the fence transaction. A step of the old plan is
therefore never submitted under its old key once the schedule changed; the
next pass opens a plan for the new version, whose keys carry ``v2``.
"""

from __future__ import annotations

from typing import Any

from gps_dagster.ports import DeployState
from tests.engine.harness import (
    A,
    B,
    World,
    a_running_pool,
    local,
    make_world,
    op_triples,
    seed_schedule,
)

EVENING = local("2026-10-19T17:59:30")


def edited() -> dict[str, Any]:
    """Version 2: the same intents tonight, plus a maintenance window next month."""
    doc = seed_schedule()
    doc["windows"].append(
        {
            "name": "maint-nov",
            "kind": "one_shot",
            "priority": 100,
            "active_from": "2026-11-18T13:00:00+07:00",
            "active_until": "2026-11-18T15:00:00+07:00",
            "states": [{"model_deploy_id": "md-qwen32b", "desired_state": "stopped"}],
        }
    )
    return doc


def b_start_keys(w: World) -> list[str]:
    return [key for d, k, key in op_triples(w) if d == B and k == "start"]


def test_version_bump_supersedes_a_step_waiting_for_capacity(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.pool.add_foreign("intruder", 8, kind="intruder")  # takes A's GPUs when they are published
    w.run_until(local("2026-10-19T18:03"))
    (old,) = w.store.list_actions(deploy_id=B)
    assert old.state == "capacity_wait" and "/v1/" in old.idempotency_key
    assert w.store.list_actions(deploy_id=A)[0].state == "converged"

    w.apply(edited())
    assert w.store.get_schedule(w.spec.name).version == 2
    w.pool.remove_foreign("intruder")
    w.run_until(local("2026-10-19T18:10"))

    stale = w.store.get_action(old.id)
    assert stale is not None
    assert (stale.state, stale.reason, stale.submitted_at) == ("superseded", "superseded", None)
    keys = b_start_keys(w)
    assert len(keys) == 1 and "/v2/" in keys[0]
    assert not [key for _, _, key in op_triples(w) if key == old.idempotency_key]
    st = w.status(B)
    assert (st.phase, st.schedule_version) == ("converged", 2)
    assert w.deploy(B).state is DeployState.READY


def test_stale_step_executed_after_the_edit_is_fenced_out(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    (plan,) = w.engine.reconcile().plans  # 18:00: plan v1 opened, its steps left to a (Dagster) run
    assert plan.schedule_version == 1
    w.apply(edited())
    stop = w.engine.execute_step(plan.release_steps[0].step_id)  # the run's op arrives late
    assert (stop.state, stop.reason) == ("superseded", "schedule_version_changed")
    start = w.engine.execute_step(plan.acquire_steps[0].step_id)
    assert (start.state, start.reason) == ("superseded", "schedule_version_changed")
    assert w.status(B).phase == "pending"  # the stale step previewed nothing and wrote no status
    assert op_triples(w) == []
    assert w.deploy(A).state is DeployState.READY

    w.run_until(local("2026-10-19T18:06"))  # the next passes open and run plan v2
    triples = op_triples(w)
    assert [(d, k) for d, k, _ in triples] == [(A, "stop"), (B, "start")]
    assert all("/v2/" in key for _, _, key in triples)
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_deploy_changed_by_hand_after_the_snapshot_is_re_read_not_overwritten(
    sqlite_url: str,
) -> None:
    """A stale ETag at submit is an ``etag_conflict``: re-read, decide again, still one stop."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    (plan,) = w.engine.reconcile().plans
    d = w.deploy(A)
    w.pool.set_replica_intent(
        A, 1, etag=d.etag, idempotency_key="operator/touch"
    )  # new ETag, same state
    first = w.engine.execute_step(plan.release_steps[0].step_id)
    assert (first.state, first.reason) == ("pending", "etag_conflict")
    assert [k for _, k, _ in op_triples(w)] == ["set_replica_intent"]
    w.run_until(local("2026-10-19T18:06"))
    assert [(dep, k) for dep, k, _ in op_triples(w)] == [
        (A, "set_replica_intent"),
        (A, "stop"),
        (B, "start"),
    ]
    assert [e.kind for e in w.store.list_events(limit=1000)].count("etag_conflict") == 1
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_a_deploy_that_keeps_changing_ends_the_step_at_its_clock_not_in_a_loop(
    sqlite_url: str,
) -> None:
    """ETag conflicts are retried only until the step's own timeout: then a terminal phase."""
    from gps_dagster.engine import EngineConfig

    w = make_world(
        sqlite_url, pool=a_running_pool(), start=EVENING, config=EngineConfig(stop_timeout_s=120)
    )
    w.tick(30)
    (plan,) = w.engine.reconcile().plans
    step = plan.release_steps[0].step_id
    for n in range(10):
        d = w.deploy(A)
        w.pool.set_replica_intent(A, 1, etag=d.etag, idempotency_key=f"operator/touch-{n}")
        outcome = w.engine.execute_step(step)
        if outcome.state == "failed":
            break
        assert (outcome.state, outcome.reason) == ("pending", "etag_conflict")
        w.clock.advance(30)
    assert (outcome.state, outcome.phase, outcome.reason) == (
        "failed",
        "stop_timeout",
        "etag_conflict",
    )
    assert 4 <= n <= 6  # 120 s of 30 s steps, counted from the plan's creation
    assert w.status(A).phase == "stop_timeout"
    assert "ETag conflicts" in (w.status(A).fix or "")
    assert not [
        k for _, k, _ in op_triples(w) if k == "stop"
    ]  # never submitted over the operator's change
