"""Which boundaries are near enough to launch their run ahead (R-NEXT-3).

A Dagster run takes seconds to start (3.3 s on a quiet machine with the default launcher,
8–22 s under load, a Job pod on Kubernetes): a run created at the boundary starts its first
op that late. A run launched ``lead`` seconds before the boundary waits for it on the injected
clock and opens the plan at the boundary instant exactly as a run launched by the boundary
would (``dagster_defs/prearm.py``). This module only answers *which* schedules have an intent
boundary within the lead: the next instant any target's intent changes
(``domain.evaluator.next_boundary``), for enabled release-first schedules (an acquire-first
plan keeps today's path: its first op is an acquire that the pre-armed job does not run).
"""

# Decisions embodied here (docs/decisions.md):
# * “Pre-armed runs”

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gps_dagster.domain.evaluator import next_boundary
from gps_dagster.domain.spec import TransitionOrder
from gps_dagster.engine.store_ports import ScheduleStore


@dataclass(frozen=True, slots=True)
class NearBoundary:
    schedule: str
    at: datetime
    """The intent boundary (an instant strictly after the tick's now)."""
    version: int
    """The schedule version the boundary was computed from (informational: the run decides
    at the boundary from the version of then)."""


def boundaries_within(store: ScheduleStore, now: datetime, lead_s: float) -> list[NearBoundary]:
    """Enabled release-first schedules whose next intent boundary is in ``(now, now + lead]``,
    soonest first."""
    if lead_s <= 0:
        return []
    horizon = now + timedelta(seconds=lead_s)
    out: list[NearBoundary] = []
    for record in store.list_schedules():
        if not record.enabled or record.spec.transition_order is not TransitionOrder.RELEASE_FIRST:
            continue
        at = next_boundary(record.spec, now)
        if at is not None and at <= horizon:
            out.append(NearBoundary(record.name, at, record.version))
    return sorted(out, key=lambda b: (b.at, b.schedule))
