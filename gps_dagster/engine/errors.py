"""Engine errors that cross the edges (CLI exit codes, Dagster sensors, the future API)."""

from __future__ import annotations

from gps_dagster.domain.errors import TemporaryError


class Busy(TemporaryError):
    """The pass lock is held by another engine: apply-now answers 409 ``busy`` (R-PASS-2)."""

    http_status = 409
    reason = "busy"

    def __init__(self, schedule: str | None = None) -> None:
        self.schedule = schedule
        super().__init__(
            f"another pass holds the lock{f' (apply-now {schedule})' if schedule else ''}"
            "; retry shortly"
        )
