"""Errors of the schedule store, shaped for the future HTTP API (R-API).

Database errors never leave the store raw (INTERFACES.md): a connection-level
failure becomes ``StoreUnavailable`` (temporary: retry later), a create or
claim race becomes a 409 (``TargetOwned``, ``ScheduleConflict``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gps_dagster.domain.errors import PermanentError, TemporaryError
from gps_dagster.domain.gps.errors import ReservationError

UNAVAILABLE_FIX = (
    "check that the database (GPS_DB_URL) is up and reachable; "
    "the engine keeps retrying on its own and resumes when it is back"
)


class StoreError(PermanentError):
    http_status = 400
    reason = "store_error"

    def __init__(self, message: str, *, fix: str = "") -> None:
        self.fix = fix
        super().__init__(message)


class StoreUnavailable(TemporaryError):
    """The database could not be reached or answered with a connection-level error."""

    http_status = 503
    reason = "store_unavailable"

    def __init__(self, message: str, *, fix: str = UNAVAILABLE_FIX) -> None:
        self.fix = fix
        super().__init__(f"store unavailable: {message}")


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


class ScheduleConflict(StoreError):
    """Two writers created the same schedule at once; the other one committed first."""

    http_status = 409
    reason = "schedule_conflict"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"schedule '{name}' was created by another writer at the same time",
            fix=f"see `gps-dagster schedules show {name}`; apply again if your version should win",
        )


class ScheduleInFlight(StoreError):
    """2.10: a schedule whose steps reached the core cannot be deleted silently."""

    http_status = 409
    reason = "schedule_in_flight"

    def __init__(self, name: str, steps: Sequence[str]) -> None:
        self.name, self.steps = name, tuple(steps)
        super().__init__(
            f"schedule '{name}' has {len(self.steps)} step(s) in flight: {', '.join(self.steps)}",
            fix=(
                'disable it ("enabled": false), '
                f"wait until `gps-dagster status {name}` shows no step "
                "in flight, then delete it; or delete it with --force to stop tracking them "
                "(the core still completes them; nothing is reverted)"
            ),
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
            fix=(
                f're-read the schedule and retry with If-Match: "{actual}" if the change still '
                "applies"
            ),
        )


class AmbiguousScheduleName(StoreError):
    """A bare name that several projects' schedules carry (names are per scope, R-API)."""

    http_status = 409
    reason = "ambiguous_schedule_name"

    def __init__(self, name: str, candidates: Sequence[str]) -> None:
        self.name, self.candidates = name, tuple(candidates)
        super().__init__(
            f"'{name}' is the name of {len(self.candidates)} tenant schedules: "
            f"{', '.join(self.candidates)}",
            fix="name the schedule with its project, e.g. " + self.candidates[0],
        )


class GpuAlreadyReserved(ReservationError):
    reason = "gpu_already_reserved"

    def __init__(self, uuids: Sequence[str]) -> None:
        self.uuids = tuple(uuids)
        super().__init__(
            f"GPU(s) {', '.join(uuids)} already belong to another reservation",
            fix="release or re-pin that reservation first, or pick other GPUs",
        )
