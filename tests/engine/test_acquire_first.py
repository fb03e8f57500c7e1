"""``transition_order: acquire_first`` (SPEC R-PASS-12): acquire, converge, only then release.

The explicit opt-in reverses the order: acquiring steps go first and must fit
alongside what runs; releasing steps wait until every acquiring step has
converged (READY), and never run to make room.
"""

from __future__ import annotations

from typing import Any

from gps_dagster.engine import EngineConfig
from gps_dagster.ports import DeployState
from tests.engine.harness import A, B, local, make_world, op_triples, seed_pool, seed_schedule

MORNING = local("2026-10-19T07:59:30")


def acquire_first() -> dict[str, Any]:
    doc = seed_schedule()
    doc["transition_order"] = "acquire_first"
    return doc


def roomy_pool() -> dict[str, Any]:
    pool = seed_pool()
    pool["nodes"].append({"name": "hgx-03", "gpus": 8, "flavor": "H100-80GB", "region": "hcm-1"})
    return pool


def test_acquire_steps_go_first_and_release_waits_for_convergence(sqlite_url: str) -> None:
    w = make_world(sqlite_url, schedule=acquire_first(), pool=roomy_pool(), start=MORNING)
    w.run_until(local("2026-10-19T08:01:30"))  # A started at 08:00, READY only at 08:02
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "start")]
    (stop_b,) = w.store.list_actions(deploy_id=B)
    assert stop_b.state == "pending" and stop_b.order == "release"
    assert w.status(A).phase == "awaiting_ready"
    assert w.deploy(B).state is DeployState.READY

    w.run_until(local("2026-10-19T08:06"))
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "start"), (B, "stop")]
    (start_a,) = w.store.list_actions(deploy_id=A)
    (stop_b,) = w.store.list_actions(deploy_id=B)
    assert start_a.finished_at is not None and stop_b.submitted_at is not None
    assert stop_b.submitted_at >= start_a.finished_at
    (b_op,) = [o for o in w.pool.operation_log() if o.deploy_id == B]
    assert b_op.created_at >= start_a.finished_at
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_acquire_first_never_releases_to_make_room(sqlite_url: str) -> None:
    w = make_world(
        sqlite_url,
        schedule=acquire_first(),
        start=MORNING,  # 10 GPUs: A (8) cannot fit beside B (6)
        config=EngineConfig(capacity_wait_s=300),
    )
    w.run_until(local("2026-10-19T08:10"))
    assert w.status(A).phase == "capacity_unavailable"
    assert op_triples(w) == []
    assert w.deploy(B).state is DeployState.READY  # B is not stopped for an acquire that never came
    (stop_b,) = w.store.list_actions(deploy_id=B)
    assert stop_b.state == "cancelled"
