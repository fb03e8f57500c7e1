"""Counters kept as running totals, added to in the transaction that changes the rows.

A Prometheus counter never goes down. Counting rows at scrape time made a
scrape read every action ever written (40 s at 400,000) and ruled out
deleting old rows. Instead each transaction that finishes steps or opens a
transition adds to ``metric_totals`` before it commits — the rows and their
count move together, or neither — and retention deletes rows without touching
a total. Keys are added in sorted order, last in the transaction, so two
writers never wait on each other's totals in opposite orders.
"""

# Decisions embodied here (docs/decisions.md):
# * “Counters are running totals”

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from gps_dagster.store.scale_tables import metric_totals as m
from gps_dagster.store.shapes import (
    ACTIONS,
    LAG_BUCKET,
    LAG_BUCKETS,
    LAG_COUNT,
    LAG_SUM,
    finished_deltas,
    lag_deltas,
)

__all__ = [
    "ACTIONS",
    "LAG_BUCKET",
    "LAG_BUCKETS",
    "LAG_COUNT",
    "LAG_SUM",
    "add",
    "count_finished",
    "count_lags",
    "finished_deltas",
    "flush",
    "lag_deltas",
    "read",
]

Key = tuple[str, str]


PENDING = "gps_metric_deltas"
"""``Connection.info`` key of the deltas a transaction has not written yet."""


def add(conn: Connection, deltas: Mapping[Key, float]) -> None:
    """Add ``deltas`` to the totals when ``flush`` runs, last in the same transaction.

    Kept per transaction: deltas of a transaction that rolled back are never written.
    """
    txn = conn.get_transaction()
    held: tuple[object, dict[Key, float]] | None = conn.info.get(PENDING)
    if held is None or held[0] is not txn:
        held = conn.info[PENDING] = (txn, {})
    for key, delta in deltas.items():
        held[1][key] = held[1].get(key, 0.0) + delta


def flush(conn: Connection) -> None:
    """Write the pending deltas (upserts in key order); call right before the commit."""
    held = conn.info.pop(PENDING, None)
    if held is None or held[0] is not conn.get_transaction():
        return
    deltas: dict[Key, float] = held[1]
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    for (metric, labels), delta in sorted(deltas.items()):
        if not delta:
            continue
        stmt = insert(m).values(metric=metric, labels=labels, value=float(delta))
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[m.c.metric, m.c.labels],
                set_={"value": m.c.value + stmt.excluded.value},
            )
        )


def count_finished(conn: Connection, finished: Iterable[tuple[str, str, str | None]]) -> None:
    """Steps that reached a terminal state, as (step, state, reason)."""
    add(conn, finished_deltas(finished))


def count_lags(conn: Connection, lags: Iterable[float | None]) -> None:
    """Transitions opened, with their boundary lag (None: no boundary, not counted)."""
    add(conn, lag_deltas(lags))


def read(conn: Connection) -> dict[str, dict[tuple[str, ...], float]]:
    """Every total, by metric then label values."""
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for metric, labels, value in conn.execute(sa.select(m.c.metric, m.c.labels, m.c.value)):
        out.setdefault(metric, {})[tuple(json.loads(labels))] = float(value)
    return out
