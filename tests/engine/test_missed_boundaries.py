"""Boundaries missed while the engine was down (SPEC R-PASS-5, R-EVAL-3).

A new interval missed during downtime still gets a plan when the engine comes
back, with the lag from the boundary measured; intervals that came and went
while it was down are not replayed: only the interval in force now acts.
"""

from __future__ import annotations

from gps_dagster.engine import EngineConfig
from gps_dagster.ports import DeployState
from tests.engine.harness import A, B, a_running_pool, jump, local, make_world, op_triples


def test_a_boundary_missed_during_downtime_acts_late_with_its_lag_measured(sqlite_url: str) -> None:
    w = make_world(
        sqlite_url,
        pool=a_running_pool(),
        start=local("2026-10-19T17:50"),
        config=EngineConfig(capacity_wait_s=300),
    )
    w.tick(30)
    jump(w, local("2026-10-19T18:20"))  # down over 18:00
    w.run_until(local("2026-10-19T18:26"))
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]
    (swap,) = [
        tr
        for tr in w.store.list_transitions(w.spec.name)
        if tr.boundary_at == local("2026-10-19T18:00")
    ]
    assert swap.lag_seconds == 20 * 60 and swap.created_at == local("2026-10-19T18:20")
    (start_b,) = w.store.list_actions(deploy_id=B)
    assert start_b.state == "converged"
    assert w.status(B).phase == "converged"


def test_intervals_that_came_and_went_while_down_are_not_replayed(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=local("2026-10-19T17:50"))
    w.tick(30)
    jump(w, local("2026-10-20T08:10"))  # down over Mon 18:00 and Tue 08:00: A running again now
    w.run_until(local("2026-10-20T08:15"))
    assert op_triples(w) == []
    assert w.deploy(A).state is DeployState.READY and w.deploy(B).state is DeployState.STOPPED
    a = w.status(A)
    assert a.phase == "converged" and a.interval_start == local("2026-10-20T08:00")
