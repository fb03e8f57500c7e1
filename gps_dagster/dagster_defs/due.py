"""Which deploy schedules need a pass now: the one seam between the Dagster layer and due work.

The boundary sensor, the every-minute schedule and ``sleep_for`` ask only these two functions.
Today they scan the schedules with the evaluator; the scale stream's index
(``Engine.due_schedules(now, limit)``, ``Engine.next_due(now)``) replaces each body with one
line, and nothing else in ``dagster_defs`` changes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gps_dagster.domain.evaluator import boundaries, next_boundary

DUE_LIMIT = 10_000


def due_schedules(
    runtime: Any, since: datetime, now: datetime, limit: int = DUE_LIMIT
) -> list[str]:
    """Names of the schedules whose intent changes in ``[since, now)``, at most ``limit``."""
    due = [r.name for r in runtime.store.list_schedules() if boundaries(r.spec, since, now)]
    return due[:limit]


def next_due(runtime: Any, now: datetime) -> list[tuple[datetime, str]]:
    """(instant, schedule) of every schedule's next boundary after ``now``, soonest first."""
    out = []
    for record in runtime.store.list_schedules():
        at = next_boundary(record.spec, now)
        if at is not None:
            out.append((at, record.name))
    return sorted(out)
