"""Retention of finished history: plans, steps, events (decision "Retention: 30 days, hourly, `db
prune`.").

``actions``, ``transitions`` and ``events`` grow with every boundary; a fleet
flipping 10,000 schedules twice a day writes tens of thousands of rows a day.
``prune`` deletes what is finished and older than the cut-off, in batches (no
long lock), and never a row something may still read or move:

* a plan is deleted with its steps only when it is closed (not ``open``),
  every step of it has finished (a finished step never moves again, a closed
  plan never reopens), it was created before the cut-off, and no target's
  status still names it (its current plan) or one of its steps (its last one);
* events older than the cut-off; apply-now requests answered before it.

Counters are running totals (``metric_totals``), not counts of rows: nothing
deleted here moves a counter. The audit log (who changed what) is kept.
"""

# Decisions embodied here (docs/decisions.md):
# * “Retention: 30 days, hourly, `db prune`”

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from gps_dagster.domain.step_state import PlanState
from gps_dagster.store import tables as t
from gps_dagster.store.shapes import BATCH, FINISHED, Pruned

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["BATCH", "Pruned", "prune"]


def prune(engine: Engine, *, before: datetime, batch: int = BATCH) -> Pruned:
    """Delete the finished history created before ``before``; returns what was deleted."""
    total = Pruned()
    while True:
        with engine.begin() as conn:
            done = _plans(conn, before, batch)
        total += done
        if done.transitions < batch:
            break
    with engine.begin() as conn:
        e, r = t.events, t.apply_now_requests
        events = conn.execute(e.delete().where(e.c.at < before)).rowcount
        requests = conn.execute(
            r.delete().where(r.c.state != "pending", r.c.handled_at < before)
        ).rowcount
    return total + Pruned(events=events, requests=requests)


def _plans(conn: Connection, before: datetime, batch: int) -> Pruned:
    tr, a, ts = t.transitions, t.actions, t.target_status
    moving = sa.select(a.c.transition_id).where(
        a.c.transition_id == tr.c.id, a.c.state.not_in(FINISHED)
    )
    named = sa.select(ts.c.transition_id).where(ts.c.transition_id == tr.c.id)
    last = sa.select(a.c.id).where(
        a.c.transition_id == tr.c.id,
        a.c.id.in_(sa.select(ts.c.last_action_id).where(ts.c.last_action_id.is_not(None))),
    )
    pick = (
        sa.select(tr.c.id)
        .where(
            tr.c.state != PlanState.OPEN,
            tr.c.created_at < before,
            ~sa.exists(moving),
            ~sa.exists(named),
            ~sa.exists(last),
        )
        .order_by(tr.c.created_at)
        .limit(batch)
    )
    ids = list(conn.execute(pick).scalars())
    if not ids:
        return Pruned()
    steps = conn.execute(
        a.delete().where(a.c.transition_id.in_(ids), a.c.state.in_(FINISHED))
    ).rowcount
    plans = conn.execute(tr.delete().where(tr.c.id.in_(ids))).rowcount
    return Pruned(transitions=plans, actions=steps)
