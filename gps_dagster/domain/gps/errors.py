"""Typed errors of the reservation ledger.

They hang off the product's error root so the CLI and the engine can tell
"change something first" (permanent) from "try again" (temporary) without
parsing messages.
"""

from __future__ import annotations

from gps_dagster.domain.errors import PermanentError


class ReservationError(PermanentError):
    """A reservation operation was refused; ``reason`` is a stable machine code."""

    reason = "reservation_error"

    def __init__(self, message: str, *, fix: str) -> None:
        self.fix = fix
        super().__init__(f"{message}; {fix}")


class ReservationNotFound(ReservationError):
    reason = "reservation_not_found"

    def __init__(self, reservation_id: str) -> None:
        self.reservation_id = reservation_id
        super().__init__(
            f"reservation '{reservation_id}' does not exist",
            fix="check the id with `gps-dagster reservations list`",
        )


class ReservationExists(ReservationError):
    reason = "reservation_exists"

    def __init__(self, reservation_id: str) -> None:
        self.reservation_id = reservation_id
        super().__init__(
            f"reservation '{reservation_id}' already exists",
            fix="choose another id, or release the existing reservation first",
        )


class StaleGeneration(ReservationError):
    """A fenced write named a generation that is no longer current (R-GPS-9)."""

    reason = "stale_generation"

    def __init__(self, reservation_id: str, *, expected: int, actual: int) -> None:
        self.reservation_id = reservation_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"reservation '{reservation_id}' is at generation {actual}, not {expected}",
            fix=(
                f"re-read the reservation and retry with --generation {actual} if the change "
                "still applies"
            ),
        )


class InvalidTransition(ReservationError):
    """A state change the reservation lifecycle does not allow (e.g. out of RELEASED)."""

    reason = "invalid_transition"

    def __init__(self, reservation_id: str, *, old: str, new: str) -> None:
        self.reservation_id = reservation_id
        self.old = old
        self.new = new
        super().__init__(
            f"reservation '{reservation_id}' cannot go from {old} to {new}",
            fix="create a new reservation instead of reviving a released one",
        )
