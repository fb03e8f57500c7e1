"""Errors of the schedule store, shaped for the future HTTP API (R-API)."""

from __future__ import annotations

from gps_dagster.domain.errors import PermanentError


class StoreError(PermanentError):
    http_status = 400
    reason = "store_error"

    def __init__(self, message: str, *, fix: str = "") -> None:
        self.fix = fix
        super().__init__(message)


class TargetOwned(StoreError):
    """R-MODEL-6: a deploy belongs to at most one schedule."""

    http_status = 409
    reason = "target_owned"

    def __init__(self, deploy_id: str, owner: str, path: str = "") -> None:
        self.deploy_id, self.owner, self.path = deploy_id, owner, path
        super().__init__(
            f"deploy '{deploy_id}' is owned by schedule '{owner}'",
            fix=f"remove it from schedule '{owner}' (or delete that schedule) first",
        )


class ScheduleNotFound(StoreError):
    http_status = 404
    reason = "schedule_not_found"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no schedule named '{name}'", fix="see `gps-dagster schedules list`")


class InvalidGate(StoreError):
    reason = "invalid_gate"

    def __init__(self, value: str) -> None:
        super().__init__(f"'{value}' is not an execution gate", fix="use off, observe or enforce")


class ScheduleExists(StoreError):
    """A create (not a replace) named a schedule that already exists."""

    http_status = 409
    reason = "schedule_exists"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"a schedule named '{name}' already exists",
            fix="choose another name, or replace it (PUT with If-Match on its version)",
        )


class VersionMismatch(StoreError):
    """A conditional write (If-Match) named a version that is no longer current (R-MODEL-8)."""

    http_status = 412
    reason = "version_mismatch"

    def __init__(self, name: str, *, expected: int, actual: int) -> None:
        self.name, self.expected, self.actual = name, expected, actual
        super().__init__(
            f"schedule '{name}' is at version {actual}, not {expected}",
            fix=f"re-read the schedule and retry with If-Match: \"{actual}\" if the change still applies",
        )
