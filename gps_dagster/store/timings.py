"""Observed start and stop durations per deploy, for ready-by leads (R-NEXT-1).

Why from the finished steps and not a table of their own: every converged step already
records when it was accepted and when it converged, per deploy, in the transaction that
finished it; retention keeps 30 days of them (about twenty business-day starts), more
than the last N the p90 is taken over. Two figures:

* start: an acquiring step's ``accepted_at`` -> ``finished_at`` (the core accepted the start
  -> READY with the applied generation);
* stop: a releasing step's ``accepted_at`` -> the moment its GPUs were usable by the swap,
  i.e. the ``submitted_at`` of the acquiring step of the same plan (the stop, the pods'
  grace and the capacity publication); a release with no acquire behind it counts until it
  converged (STOPPED, no terminating pod).
"""

# Decisions embodied here (docs/decisions.md):
# * “Ready-by: the lead is learned from finished steps, one lead per boundary”

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa

from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_state import StepState
from gps_dagster.store import tables as t
from gps_dagster.store.shapes import ACQUIRE_STEPS, RELEASE_STEPS

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def start_durations(
    engine: Engine, deploy_ids: Sequence[str], limit: int
) -> dict[str, list[float]]:
    """The last ``limit`` start -> READY durations (seconds) of each deploy, newest first."""
    a = t.actions
    out: dict[str, list[float]] = {d: [] for d in deploy_ids}
    with engine.connect() as conn:
        for deploy in deploy_ids:
            rows = conn.execute(
                sa.select(a.c.accepted_at, a.c.finished_at)
                .where(
                    a.c.deploy_id == deploy,
                    a.c.step.in_(ACQUIRE_STEPS),
                    a.c.state == StepState.CONVERGED,
                    a.c.accepted_at.is_not(None),
                    a.c.finished_at.is_not(None),
                )
                .order_by(a.c.finished_at.desc())
                .limit(limit)
            ).all()
            out[deploy] = [(f - s).total_seconds() for s, f in rows]
    return out


def stop_durations(engine: Engine, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]:
    """The last ``limit`` stop -> GPUs-usable durations (seconds) of each deploy, newest first."""
    a = t.actions
    acq = a.alias("acq")
    out: dict[str, list[float]] = {d: [] for d in deploy_ids}
    with engine.connect() as conn:
        for deploy in deploy_ids:
            follow = (
                sa.select(sa.func.min(acq.c.submitted_at))
                .where(acq.c.transition_id == a.c.transition_id, acq.c.order == Order.ACQUIRE)
                .scalar_subquery()
            )
            rows = conn.execute(
                sa.select(a.c.accepted_at, a.c.finished_at, follow)
                .where(
                    a.c.deploy_id == deploy,
                    a.c.step.in_(RELEASE_STEPS),
                    a.c.state == StepState.CONVERGED,
                    a.c.accepted_at.is_not(None),
                    a.c.finished_at.is_not(None),
                )
                .order_by(a.c.finished_at.desc())
                .limit(limit)
            ).all()
            out[deploy] = [
                ((n if n is not None and n > s else f) - s).total_seconds() for s, f, n in rows
            ]
    return out
