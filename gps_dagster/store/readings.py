"""What the engine's metrics, retention, ready-by and witness need from the database.

The engine renders Prometheus metrics, decides when to prune, learns ready-by
leads and checks placements against the reservation ledger, but it does not
speak SQL nor hold the database engine: the store reads a scrape's figures in
one connection (a frozen ``MetricReadings``), deletes old history
(``retention.prune``), reads the learned start and stop durations
(``timings``) and hands out its reservation ledger, and the engine only sees
these methods of the store (``engine/store_ports.py``).
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine is typed by store Protocols, never by the concrete store”

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from gps_dagster.store import metric_totals
from gps_dagster.store import tables as t
from gps_dagster.store.reservations import ReservationRepository
from gps_dagster.store.retention import BATCH, Pruned, prune
from gps_dagster.store.scale_tables import IN_FLIGHT_STATES
from gps_dagster.store.shapes import MetricReadings, Totals
from gps_dagster.store.timings import start_durations, stop_durations

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["MetricReadings", "ReadingsMixin", "Totals"]


class ReadingsMixin:
    """``Store.metric_readings``, ``prune``, ``start_durations``, ``stop_durations``, ``ledger``."""

    engine: Engine

    def metric_readings(self, *, serving: bool = True) -> MetricReadings:
        """The figures of one scrape; ``serving=False`` leaves the per-target rows out."""
        with self.engine.connect() as conn:
            return MetricReadings(
                totals=metric_totals.read(conn),
                serving=tuple(_serving(conn)) if serving else (),
                in_flight=tuple(_in_flight(conn)),
            )

    def prune(self, *, before: datetime, batch: int = BATCH) -> Pruned:
        """Delete the finished history created before ``before`` (``retention.prune``)."""
        return prune(self.engine, before=before, batch=batch)

    def start_durations(self, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]:
        """The last ``limit`` start -> READY durations of each deploy (``timings``)."""
        return start_durations(self.engine, deploy_ids, limit)

    def stop_durations(self, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]:
        """The last ``limit`` stop -> GPUs usable durations of each deploy (``timings``)."""
        return stop_durations(self.engine, deploy_ids, limit)

    def ledger(self) -> ReservationRepository:
        """The reservation ledger on this store's database."""
        return ReservationRepository(self.engine)


def _serving(conn: Connection) -> list[tuple[str, str, str, bool]]:
    ts = t.target_status
    observed = ts.c.detail["observed_state"].as_string()
    rows = conn.execute(
        sa.select(ts.c.schedule_name, ts.c.deploy_id, ts.c.phase, observed).order_by(
            ts.c.schedule_name, ts.c.deploy_id
        )
    )
    return [(schedule, target, phase, state == "READY") for schedule, target, phase, state in rows]


def _in_flight(conn: Connection) -> list[tuple[str, str, int]]:
    a = t.actions
    rows = conn.execute(
        sa.select(a.c.step, a.c.state, sa.func.count())
        .where(a.c.state.in_(IN_FLIGHT_STATES))
        .group_by(a.c.step, a.c.state)
        .order_by(a.c.step, a.c.state)
    )
    return [(step, state, int(n)) for step, state, n in rows]
