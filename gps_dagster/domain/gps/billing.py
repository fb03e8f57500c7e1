"""Quota and billing of reservations (R-GPS-8).

* Quota: a reservation counts its GPUs, once. Deploys bound to it (exclusive
  or time-sliced) count only CPU and RAM — counting a GPU per time-sliced
  member is the known bug this module exists to avoid (3 members on one GPU
  are 1 GPU, not 3).
* Billing: reservation-hours accrue while the reservation is ACTIVE, idle or
  not, and stop at DEGRADED / RELEASING / RELEASED (seed Q3).

Time is a parameter: usage is computed from a state history over a half-open
range ``[start, end)``; nothing here reads the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from gps_dagster.domain.gps.reservations import BILLED_STATES, Reservation, ReservationState

_HOUR = Decimal(3600)


@dataclass(frozen=True, slots=True)
class Usage:
    reservation_id: str
    gpus: int
    billed_seconds: int

    @property
    def billed_hours(self) -> Decimal:
        """Reservation-hours, exact to the second (6 decimals)."""
        return (Decimal(self.billed_seconds) / _HOUR).quantize(Decimal("0.000001"))

    @property
    def gpu_hours(self) -> Decimal:
        return (Decimal(self.billed_seconds * self.gpus) / _HOUR).quantize(Decimal("0.000001"))


def billed_seconds(
    history: Sequence[tuple[datetime, ReservationState]], *, start: datetime, end: datetime
) -> int:
    """Seconds of ``[start, end)`` spent in a billed state; ``history`` is (at, new state), any
    order."""
    _aware(start, end, *(at for at, _ in history))
    if end <= start:
        return 0
    points = sorted(history, key=lambda p: p[0])
    total = timedelta()
    for i, (at, state) in enumerate(points):
        until = points[i + 1][0] if i + 1 < len(points) else end
        lo, hi = max(at, start), min(until, end)
        if state in BILLED_STATES and hi > lo:
            total += hi - lo
    return int(total.total_seconds())


def usage(
    reservation: Reservation,
    history: Sequence[tuple[datetime, ReservationState]],
    *,
    start: datetime,
    end: datetime,
) -> Usage:
    """Billed reservation-hours and GPU-hours of one reservation over ``[start, end)``."""
    return Usage(
        reservation.id, reservation.gpu_count, billed_seconds(history, start=start, end=end)
    )


@dataclass(frozen=True, slots=True)
class Workload:
    """A deploy's footprint for quota: ``reservation`` set when it is bound to one."""

    deploy_id: str
    gpus: int
    cpu_millis: int
    memory_mib: int
    reservation: str | None = None


def reservation_project(reservation: Reservation) -> str | None:
    """The CMP project a reservation is charged to: its namespace ``cmp-<project>``; else None
    (admin)."""
    ns = reservation.namespace
    return ns[len("cmp-") :] if ns.startswith("cmp-") and len(ns) > len("cmp-") else None


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    gpus: int
    cpu_millis: int
    memory_mib: int


def quota_usage(reservations: Iterable[Reservation], workloads: Iterable[Workload]) -> QuotaUsage:
    """A project's quota footprint: reservation GPUs once, bound workloads CPU/RAM only."""
    held = {r.id: r for r in reservations if r.state is not ReservationState.RELEASED}
    gpus = sum(r.gpu_count for r in held.values())
    cpu = mem = 0
    for w in workloads:
        cpu += w.cpu_millis
        mem += w.memory_mib
        if w.reservation is None or w.reservation not in held:
            gpus += w.gpus
    return QuotaUsage(gpus, cpu, mem)


def _aware(*moments: datetime) -> None:
    for m in moments:
        if m.tzinfo is None or m.utcoffset() is None:
            raise ValueError(f"naive datetime {m.isoformat()}: pass timezone-aware times")
