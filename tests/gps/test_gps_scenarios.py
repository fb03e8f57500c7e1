"""The GPS scenarios end to end through the real engine and the simulated pool.

* gpu42 (R-GPS-11): business hours A + C, outside B + C on one time-sliced
  H200; each swap keeps the GPU group alive, A and B are never on the GPU
  together, and the witness confirms B's UUID at the end.
* scenario 2 with reservations (R-GPS-2): B binds exclusive{8} to R2 and
  lands only on R2's UUIDs, even with an intruder grabbing published GPUs.
* preflight (R-PASS-6): when the acquiring member could not be admitted,
  nothing is released; a misplaced member ends in ``placement_mismatch``
  with a fix text and no automatic repair.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gps_fixtures import GPU42_UUID
from gps_sim import (
    RSV,
    A,
    B,
    C,
    engine_world,
    example_pool,
    example_schedule,
    gpu42_schedule,
    local,
    node_uuids,
    shared_pool,
)

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.ports import DeployState
from gps_dagster.simulation import simulate
from gps_dagster.store import Store
from gps_dagster.store.reservations import ReservationRepository

HOLDER = f"holder:{RSV}"
MONDAY = local("2026-10-19T00:00")


def _reopen(url: str, pool: str, at: datetime) -> SimPool:
    engine = Store.open(url).engine
    return SimPool.open(engine, pool, VirtualClock(at), ledger=ReservationRepository(engine))


def test_gpu42_swaps_a_and_b_around_c_within_budget(sqlite_url: str) -> None:
    spec = load_schedule(gpu42_schedule())
    end = MONDAY + timedelta(days=2)
    rep = simulate(spec, load_pool(example_pool("gpu42-pool.yaml")), MONDAY, end, db_url=sqlite_url)
    assert {t: s["phase"] for t, s in rep.final_status.items()} == {
        A: "converged",
        B: "converged",
        C: "converged",
    }
    assert [(o["deploy"], o["kind"]) for o in rep.operations] == [
        (B, "stop"),
        (A, "start"),
        (A, "stop"),
        (B, "start"),
    ] * 2
    assert rep.witness == {A: [], B: [GPU42_UUID], C: [GPU42_UUID]}
    pool = _reopen(sqlite_url, "gpu42", end)
    history = [p for p in pool.usage_history() if p.at < end]
    on_gpu = [p.shared.get(RSV, []) for p in history]
    assert all(on_gpu), "the GPU group was empty during a swap"
    assert all(C in o for o in on_gpu)  # C always on keeps the group alive itself: no holder needed
    assert not [
        o for o in on_gpu if A in o and B in o
    ]  # never co-resident: A + B + C is over budget
    assert all(p.in_use.get(RSV) == 1 and p.in_use.get("opportunist", 0) == 0 for p in history)
    assert rep.max_gpus_in_use == 8  # 7 other tenants + the one shared GPU
    assert set(pool.witness(B).uuids) <= {GPU42_UUID}


def test_scenario2_with_reservations_lands_b_only_on_r2(sqlite_url: str) -> None:
    doc = example_pool("scenario2-reservations-pool.yaml")
    r2 = set(doc["reservations"][1]["gpu_uuids"])
    assert r2 == node_uuids(doc["name"], "hgx-02")
    spec = load_schedule(example_schedule("scenario2-schedule.json"))
    end = MONDAY + timedelta(hours=20)
    rep = simulate(spec, load_pool(doc), MONDAY, end, db_url=sqlite_url)
    assert {t: s["phase"] for t, s in rep.final_status.items()} == {
        "md-llama70b": "converged",
        "md-qwen-8gpu": "converged",
    }
    assert set(rep.witness["md-qwen-8gpu"]) == r2
    assert rep.downtime_seconds == {"md-llama70b": 0.0}
    pool = _reopen(sqlite_url, doc["name"], end)
    assert all(
        p.in_use.get("opportunist", 0) == 0 for p in pool.usage_history()
    )  # the intruder never got in
    qwen = [p for p in pool.usage_history() if p.in_use.get("md-qwen-8gpu")]
    assert qwen and all(p.in_use["md-qwen-8gpu"] == 8 for p in qwen)
    assert max(p.total_in_use for p in pool.usage_history()) == 16


def test_preflight_refuses_the_swap_before_releasing_anything(sqlite_url: str) -> None:
    pool = shared_pool(
        {A: 96_000, B: 80_000, C: 50_000}, running=(B, C)
    )  # A + C = 146 000 > 136 582
    w = engine_world(sqlite_url, pool, gpu42_schedule(), local("2026-10-19T07:59:30"))
    w.run_until(local("2026-10-19T08:05"))
    status = w.status(A)
    assert (status.phase, status.reason) == (
        "reservation_overcommitted",
        "reservation_overcommitted",
    )
    assert "136 582 MiB budget" in (status.fix or "") and "over by 9 418 MiB" in (status.fix or "")
    assert w.pool.get_deploy(B).state is DeployState.READY  # B was not stopped for nothing
    assert w.pool.operation_log() == []


def test_a_misplaced_member_ends_in_placement_mismatch_without_repair(sqlite_url: str) -> None:
    w = engine_world(
        sqlite_url,
        shared_pool({A: 96_000, B: 80_000, C: 24_000}, running=(B, C)),
        gpu42_schedule(),
        local("2026-10-19T07:59:30"),
    )
    w.pool.inject_fault(FaultSpec(effect="misplace", deploy=A))
    w.run_until(local("2026-10-19T08:30"))
    status = w.status(A)
    assert status.phase == "placement_mismatch"
    assert "outside reservation" in (status.fix or "") and "no automatic repair" in (
        status.fix or ""
    )
    assert [(o.deploy_id, o.kind.value) for o in w.pool.operation_log()] == [
        (B, "stop"),
        (A, "start"),
    ]
    assert (
        w.pool.get_deploy(A).state is DeployState.READY
    )  # kept running: moving it is an operator's call
