"""The composition root wires the GPS hooks and the pool file's reservations into the one ledger."""

from __future__ import annotations

from gps_fixtures import ROOT
from gps_sim import RSV, T0

from gps_dagster.clocks import VirtualClock
from gps_dagster.runtime import build_runtime, settings_from_env
from gps_dagster.store.reservations import ReservationRepository


def test_build_runtime_records_reservations_and_wires_both_hooks(sqlite_url: str) -> None:
    pool = str(ROOT / "examples" / "gpu42-pool.yaml")
    settings = settings_from_env({}, db_url=sqlite_url, pool_file=pool)
    rt = build_runtime(settings, clock=VirtualClock(T0))
    assert [r.id for r in ReservationRepository(rt.store.engine).list()] == [RSV]
    assert (
        rt.engine.planner.reservation_check is not None and rt.engine.observer.witness is not None
    )
    audit = ReservationRepository(rt.store.engine).audit(RSV)
    assert [(a.action, a.actor) for a in audit] == [("create", "pool-file:gpu42")]
    again = build_runtime(settings, clock=VirtualClock(T0), reload_pool=True)
    assert (
        len(ReservationRepository(again.store.engine).audit(RSV)) == 1
    )  # the ledger, not the file, wins
