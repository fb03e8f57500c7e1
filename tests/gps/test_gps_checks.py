"""The asset-check functions on real ledger + core state (R-DAG-4)."""

from __future__ import annotations

from datetime import timedelta

from gps_sim import RSV, open_sim, shared_pool

from gps_dagster.domain.pool import FaultSpec
from gps_dagster.engine.gps_checks import overcommit_check, placement_check, reservation_ids


def test_reservation_ids_are_the_ledger_s_live_reservations(sqlite_url: str) -> None:
    sim = open_sim(sqlite_url, shared_pool({"md-a": 1_000}))
    assert reservation_ids(sim.ledger) == [RSV]
    sim.ledger.release(RSV, at=sim.clock.now(), actor="test")
    assert reservation_ids(sim.ledger) == []


def test_placement_check_passes_on_confirmed_uuids_and_fails_on_a_misplaced_pod(
    sqlite_url: str,
) -> None:
    sim = open_sim(sqlite_url, shared_pool({"md-a": 1_000, "md-b": 1_000}))
    assert placement_check(sim.ledger, sim.pool, RSV).passed  # nothing ready: nothing to witness
    sim.start("md-a")
    sim.clock.advance(timedelta(minutes=3))
    ok = placement_check(sim.ledger, sim.pool, RSV)
    assert ok.passed and "md-a: GPU-6b167f5c" in ok.metadata["witnessed"]
    sim.pool.inject_fault(FaultSpec(effect="misplace", deploy="md-b"))
    sim.start("md-b")
    sim.clock.advance(timedelta(minutes=3))
    bad = placement_check(sim.ledger, sim.pool, RSV)
    assert not bad.passed and bad.description.startswith("placement_mismatch")
    assert bad.metadata["mismatches"] == 1 and "no automatic repair" in bad.metadata["fix"]


def test_overcommit_check_reports_the_budget_figures(sqlite_url: str) -> None:
    sim = open_sim(
        sqlite_url, shared_pool({"md-a": 96_000, "md-c": 24_000}, running=("md-a", "md-c"))
    )
    out = overcommit_check(sim.ledger, sim.pool, RSV)
    assert out.passed and out.description == "within budget: 120 000 of 136 582 MiB"
    assert (out.metadata["budget_mib"], out.metadata["started_mib"], out.metadata["free_mib"]) == (
        136_582,
        120_000,
        16_582,
    )
