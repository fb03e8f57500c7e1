"""Which deploy schedules need a pass now: the one seam between the Dagster layer and due work.

The boundary sensor and the every-minute schedule ask only these functions, and each answers
from the engine's due index (decision "Due work is found by index"): one indexed read says
whether anything is due (a quiet tick parses no schedule), and due work is served by
``Engine.reconcile_due`` — the due rows claimed in batches, only their specs read, plans opened
without running steps, no pass lock.
A schedule is due at its boundary whatever the sensor's cursor says (a sensor that was down
serves it on its next tick), and again ``follow_up_s`` after a visit while steps are in flight.
"""

# Decisions embodied here (docs/decisions.md):
# * “Dagster finds due work by the index, and its cursor no longer decides what is due”

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

UPCOMING = 5


def due_now(runtime: Runtime, now: datetime) -> tuple[bool, datetime | None]:
    """Whether some schedule needs a pass at ``now``, and the earliest instant one does."""
    at = runtime.engine.next_due(now)
    return at is not None and at <= now, at


def serve_due_work(runtime: Runtime, trigger: str) -> Any:
    """Claim and visit every schedule due now; the pass report (plans opened, not run)."""
    return runtime.engine.reconcile_due(trigger=trigger)


def upcoming(runtime: Runtime, now: datetime, limit: int = UPCOMING) -> list[tuple[datetime, str]]:
    """(instant, schedule) of the next ``limit`` passes due after ``now``, soonest first."""
    return list(runtime.engine.upcoming_due(now, limit))
