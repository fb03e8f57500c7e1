"""VRAM admission for time-sliced reservations (R-GPS-3).

Σ memory of members running + actions in flight + the proposed one must stay
within ``budget = floor(gpu_memory × headroom)``. Exactly at the budget is
admitted; one MiB more is ``reservation_overcommitted``, a terminal phase with
the numbers in its fix text so an operator sees what to lower.

Each member is counted once, at its newest figure: a proposed start of a deploy
that is already in flight (a resubmission after a lost response) or running
(a change of ``memory_mib``) replaces, never adds to, its earlier figure.
The function is pure; serialising admissions per reservation generation is the
caller's job (the repository's locked admission, the engine's fence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gps_dagster.domain.gps.reservations import (
    Reservation,
    ReservationState,
    SharingMode,
    format_mib,
)

OVERCOMMITTED = "reservation_overcommitted"
NOT_ACTIVE = "reservation_not_active"
MODE_MISMATCH = "reservation_mode_mismatch"


@dataclass(frozen=True, slots=True)
class Admitted:
    """The proposed member fits; ``total_mib`` includes it."""

    reservation_id: str
    generation: int
    budget_mib: int
    total_mib: int

    @property
    def free_mib(self) -> int:
        return self.budget_mib - self.total_mib


@dataclass(frozen=True, slots=True)
class Overcommitted:
    """Terminal ``reservation_overcommitted`` with every figure behind the decision."""

    reservation_id: str
    budget_mib: int
    running_mib: int
    in_flight_mib: int
    proposed_mib: int
    reason: str = OVERCOMMITTED

    @property
    def over_by_mib(self) -> int:
        return self.running_mib + self.in_flight_mib + self.proposed_mib - self.budget_mib

    @property
    def fix(self) -> str:
        return (
            f"{format_mib(self.budget_mib)} MiB budget, {format_mib(self.running_mib)} MiB "
            f"running, {format_mib(self.in_flight_mib)} MiB in flight, proposed "
            f"{format_mib(self.proposed_mib)} MiB: over by {format_mib(self.over_by_mib)} MiB; "
            "lower memory_mib or stop a member"
        )


@dataclass(frozen=True, slots=True)
class Ineligible:
    """The reservation cannot admit anyone (not ACTIVE, or not time-sliced)."""

    reservation_id: str
    reason: str
    fix: str


Decision = Admitted | Overcommitted | Ineligible


def admit(
    reservation: Reservation,
    *,
    running: Mapping[str, int],
    in_flight: Mapping[str, int],
    proposed: tuple[str, int],
) -> Decision:
    """Decide whether ``proposed = (deploy_id, memory_mib)`` fits the reservation's budget.

    ``running`` and ``in_flight`` map member deploy ids to their ``memory_mib``.
    """
    if reservation.state is not ReservationState.ACTIVE:
        return Ineligible(
            reservation.id,
            NOT_ACTIVE,
            f"reservation is {reservation.state}; start members only on an ACTIVE reservation",
        )
    if reservation.mode is not SharingMode.TIME_SLICED:
        return Ineligible(
            reservation.id,
            MODE_MISMATCH,
            "VRAM admission applies to time-sliced reservations; bind exclusive{...} instead",
        )
    deploy_id, proposed_mib = proposed
    flying = {k: v for k, v in in_flight.items() if k != deploy_id}
    steady = {k: v for k, v in running.items() if k != deploy_id and k not in flying}
    running_mib, in_flight_mib = sum(steady.values()), sum(flying.values())
    total = running_mib + in_flight_mib + proposed_mib
    if total <= reservation.budget_mib:
        return Admitted(reservation.id, reservation.generation, reservation.budget_mib, total)
    return Overcommitted(
        reservation.id, reservation.budget_mib, running_mib, in_flight_mib, proposed_mib
    )
