"""A pass for one schedule that waits a moment for the engine's lock instead of giving up.

Several boundary schedules firing at the same minute (or a schedule and a sensor) ask for
passes at once; each holds the engine's lock for a fraction of a second. Answering ``Busy``
at once left the boundary to the next sensor tick (seconds later, measured: p95 11 s with three
schedules at one minute); waiting up to ``BUSY_WAIT_S`` serves it in the same tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gps_dagster.dagster_defs.resources import sleep
from gps_dagster.engine.errors import Busy

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

BUSY_PAUSE_S = 0.1
BUSY_WAIT_S = 5.0


def reconcile_one(gps: Any, runtime: Runtime, schedule: str, trigger: str) -> Any:
    """``engine.reconcile(schedule=...)``, retried while another pass holds the lock."""
    attempts = int(BUSY_WAIT_S / BUSY_PAUSE_S) if gps is not None else 1
    for attempt in range(attempts):
        try:
            return runtime.engine.reconcile(schedule=schedule, trigger=trigger)
        except Busy:
            if attempt == attempts - 1:
                raise
            sleep(gps, BUSY_PAUSE_S)
    raise AssertionError("unreachable")
