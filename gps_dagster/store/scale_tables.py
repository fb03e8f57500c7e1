"""Tables of the engine at scale (R-NEXT-4, R-PASS-11): the due index and the metric totals.

* ``schedule_due`` — one row per schedule: when it next needs a pass
  (``due_at``; NULL = never, a disabled schedule with nothing in flight), and
  which engine replica has claimed it for the pass in progress
  (``claimed_by`` until ``claimed_until``: a crashed replica's claim expires).
  ``revision`` grows every time something marks the schedule due (apply, the
  gate): a pass writes its "next due" only if nothing marked it since it
  claimed the row, so a mark is never lost. Found by index, never by parsing
  every schedule (the boundary sensor, ``sleep_for``, the pass). ``spec_sha``
  (the document's SHA-256) keys the cache of parsed schedules: a schedule
  deleted and created again restarts at version 1 with another document.
* ``metric_totals`` — Prometheus counters kept as running totals, added to in
  the transaction that finishes a step or opens a transition. A scrape reads a
  few rows instead of every action ever written, and retention may delete old
  rows without a counter going down.
"""

from __future__ import annotations

import sqlalchemy as sa

from gps_dagster.domain.step_state import PlanState
from gps_dagster.store.schema import UtcDateTime, metadata
from gps_dagster.store.shapes import IN_FLIGHT_STATES  # the states the partial index below covers
from gps_dagster.store.tables import actions, transitions

UTC_TS = UtcDateTime()

__all__ = ["IN_FLIGHT_STATES", "metric_totals", "schedule_due"]

schedule_due = sa.Table(
    "schedule_due",
    metadata,
    sa.Column(
        "name",
        sa.String(128),
        sa.ForeignKey("schedules.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("spec_sha", sa.String(64)),
    sa.Column("due_at", UTC_TS, index=True),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("claimed_by", sa.String(120)),
    sa.Column("claimed_until", UTC_TS),
)

metric_totals = sa.Table(
    "metric_totals",
    metadata,
    sa.Column("metric", sa.String(64), primary_key=True),
    sa.Column("labels", sa.String(400), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
)

_in_flight = actions.c.state.in_(IN_FLIGHT_STATES)
sa.Index(
    "ix_actions_in_flight",
    actions.c.schedule_name,
    actions.c.state,
    postgresql_where=_in_flight,
    sqlite_where=_in_flight,
)
sa.Index("ix_actions_finished_at", actions.c.finished_at)
_open = transitions.c.state == PlanState.OPEN
sa.Index(
    "ix_transitions_open",
    transitions.c.schedule_name,
    postgresql_where=_open,
    sqlite_where=_open,
)
sa.Index("ix_transitions_created_at", transitions.c.created_at)
