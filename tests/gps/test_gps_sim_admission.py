"""VRAM admission inside the simulated core's start (R-GPS-3), on SQLite and PostgreSQL.

Admission is the core's own: manual starts go through it exactly like the
engine's, at the exact budget boundary, counting members in flight, and two
starts racing for the last MiB cannot both win.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from gps_sim import BUDGET, RSV, open_sim, shared_pool

from gps_dagster.backends.sim import SimPool
from gps_dagster.ports import AdmissionRefused, DeployState


def test_exactly_the_budget_is_admitted_and_one_mib_more_is_refused(db_url: str) -> None:
    sim = open_sim(
        db_url,
        shared_pool(
            {"md-a": 100_000, "md-b": BUDGET - 100_000, "md-c": BUDGET - 100_000 + 1},
            running=("md-a",),
        ),
    )
    sim.start("md-b")  # 100 000 + 36 582 = 136 582: exactly the budget
    assert sim.pool.get_deploy("md-b").state is not DeployState.STOPPED
    sim.stop("md-b")
    with pytest.raises(AdmissionRefused) as err:
        sim.start("md-c")  # one MiB more
    assert err.value.reason == "reservation_overcommitted"
    assert "136 582 MiB budget" in str(err.value) and "over by 1 MiB" in str(err.value)
    assert sim.pool.get_deploy("md-c").state is DeployState.STOPPED
    assert [o.deploy_id for o in sim.pool.operation_log() if o.kind.value == "start"] == ["md-b"]


def test_a_member_in_flight_is_counted(db_url: str) -> None:
    sim = open_sim(db_url, shared_pool({"md-a": 70_000, "md-b": 70_000}))
    sim.start("md-a")
    assert (
        sim.pool.get_deploy("md-a").state is DeployState.STARTING
    )  # admitted, not ready: in flight
    with pytest.raises(AdmissionRefused) as err:
        sim.start("md-b")
    assert "70 000 MiB in flight" in str(err.value) and "0 MiB running" in str(err.value)
    sim.clock.advance(timedelta(minutes=3))
    with pytest.raises(AdmissionRefused) as err:
        sim.start("md-b")
    assert "70 000 MiB running" in str(err.value)


def test_a_manual_start_over_budget_is_refused_with_the_numbers(db_url: str) -> None:
    sim = open_sim(
        db_url,
        shared_pool({"md-a": 96_000, "md-b": 80_000, "md-c": 24_000}, running=("md-a", "md-c")),
    )
    with pytest.raises(AdmissionRefused) as err:
        sim.start("md-b", key="operator-by-hand")
    message = str(err.value)
    assert err.value.reason == "reservation_overcommitted"
    assert (
        "120 000 MiB running" in message
        and "proposed 80 000 MiB" in message
        and "over by 63 418 MiB" in message
    )
    assert not [o for o in sim.pool.operation_log() if o.deploy_id == "md-b"]


def test_racing_starts_for_the_last_mib_exactly_one_wins(db_url: str) -> None:
    members = {f"md-{i}": 1_000 for i in range(6)}
    members["md-base"] = BUDGET - 1_000
    sim = open_sim(db_url, shared_pool(members, running=("md-base",)))
    pools = [
        SimPool.open(sim.store.engine, "gpu42", sim.clock, ledger=sim.ledger) for _ in range(6)
    ]
    barrier = threading.Barrier(6)
    won: list[str] = []
    refused: list[str] = []

    def race(i: int) -> None:
        deploy = f"md-{i}"
        etag = pools[i].get_deploy(deploy).etag
        barrier.wait()
        try:
            pools[i].start(deploy, etag=etag, idempotency_key=f"race-{i}")
            won.append(deploy)
        except AdmissionRefused as exc:
            assert exc.reason == "reservation_overcommitted"
            refused.append(deploy)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 5
    started = [d for d in members if sim.pool.get_deploy(d).state is not DeployState.STOPPED]
    assert sorted(started) == sorted(["md-base", *won])


def test_admission_preview_is_read_only_and_credits_releasing_members(sqlite_url: str) -> None:
    sim = open_sim(
        sqlite_url,
        shared_pool({"md-a": 96_000, "md-b": 80_000, "md-c": 24_000}, running=("md-a", "md-c")),
    )
    before = sim.pool.revision()
    seen = sim.pool.admission_preview("md-b", delta_replicas=1)
    assert (seen.admitted, seen.reason, seen.reservation_id) == (
        False,
        "reservation_overcommitted",
        RSV,
    )
    assert (seen.budget_mib, seen.running_mib, seen.in_flight_mib, seen.proposed_mib) == (
        BUDGET,
        120_000,
        0,
        80_000,
    )
    assert sim.pool.admission_preview("md-b", delta_replicas=1, releasing=["md-a"]).admitted
    assert sim.pool.admission_preview(
        "md-a", delta_replicas=1
    ).admitted  # already counted once, not twice
    assert sim.pool.revision() == before
