"""How a deploy binds to reservations (R-GPS-2).

Two shapes, told apart by ``mode``:

* ``exclusive``: whole GPUs, ``gpus_per_replica`` of them, taken only from the
  listed reservations (scenario 2: B binds exclusive{8} to R2 and so can only
  land on the UUIDs A released).
* ``time_sliced``: a member of one shared reservation with a VRAM share
  ``memory_mib`` that admission counts against the budget.

``binding_errors`` checks a binding against the ledger, so that a bad binding
is refused when it is declared, not at the first start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from gps_dagster.domain.documents import build
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.gps.reservations import (
    Reservation,
    ReservationState,
    SharingMode,
    format_mib,
)
from gps_dagster.domain.models import Frozen


class ExclusiveBinding(Frozen):
    mode: Literal["exclusive"] = "exclusive"
    gpus_per_replica: int = Field(
        ge=1,
        le=65_536,
        strict=True,
        description="Whole GPUs of one replica, all on one reservation.",
    )
    reservations: tuple[str, ...] = Field(
        min_length=1, description="Reservation ids a replica may land on."
    )


class TimeSlicedBinding(Frozen):
    mode: Literal["time_sliced"] = "time_sliced"
    reservation: str = Field(
        min_length=1, description="The shared reservation this deploy is a member of."
    )
    memory_mib: int = Field(
        ge=1,
        le=10_000_000,
        strict=True,
        description="VRAM share admitted against the reservation's budget.",
    )


Binding = Annotated[ExclusiveBinding | TimeSlicedBinding, Field(discriminator="mode")]


class _BindingDoc(Frozen):
    binding: Binding


def load_binding(data: Any, *, source: str = "<binding>") -> ExclusiveBinding | TimeSlicedBinding:
    """Validate a binding mapping (``{"mode": ..., ...}``); errors carry field paths."""
    doc = build(
        _BindingDoc,
        {"binding": data},
        source=source,
        tags=frozenset({"exclusive", "time_sliced"}),
    )
    return doc.binding


def binding_errors(
    binding: ExclusiveBinding | TimeSlicedBinding,
    ledger: Mapping[str, Reservation],
    *,
    path: str = "binding",
) -> list[FieldError]:
    """Every reason this binding cannot be honoured by the reservations in ``ledger``."""
    if isinstance(binding, TimeSlicedBinding):
        return _time_sliced_errors(binding, ledger, path)
    return _exclusive_errors(binding, ledger, path)


def _usable(rsv: Reservation | None, rid: str, path: str, mode: SharingMode) -> list[FieldError]:
    if rsv is None:
        return [
            FieldError(
                path, "unknown_reservation", f"create reservation '{rid}' first or fix the id"
            )
        ]
    if rsv.state is not ReservationState.ACTIVE:
        return [
            FieldError(
                path,
                "reservation_not_active",
                f"reservation '{rid}' is {rsv.state}; bind to an ACTIVE one",
            )
        ]
    if rsv.mode is not mode:
        return [
            FieldError(
                path,
                "reservation_mode_mismatch",
                f"reservation '{rid}' is {rsv.mode}; bind as {rsv.mode} or pick a {mode} "
                "reservation",
            )
        ]
    return []


def _time_sliced_errors(
    b: TimeSlicedBinding, ledger: Mapping[str, Reservation], path: str
) -> list[FieldError]:
    rsv = ledger.get(b.reservation)
    problems = _usable(rsv, b.reservation, f"{path}.reservation", SharingMode.TIME_SLICED)
    if rsv is not None and not problems and b.memory_mib > rsv.budget_mib:
        problems.append(
            FieldError(
                f"{path}.memory_mib",
                "memory_over_budget",
                f"{format_mib(b.memory_mib)} MiB exceeds the whole budget of "
                f"{format_mib(rsv.budget_mib)} MiB; lower memory_mib",
            )
        )
    return problems


def _exclusive_errors(
    b: ExclusiveBinding, ledger: Mapping[str, Reservation], path: str
) -> list[FieldError]:
    problems: list[FieldError] = []
    seen: set[str] = set()
    for i, rid in enumerate(b.reservations):
        item = f"{path}.reservations[{i}]"
        if rid in seen:
            problems.append(FieldError(item, "duplicate_reservation", "list each reservation once"))
            continue
        seen.add(rid)
        rsv = ledger.get(rid)
        found = _usable(rsv, rid, item, SharingMode.EXCLUSIVE)
        if rsv is not None and not found and rsv.gpu_count < b.gpus_per_replica:
            found.append(
                FieldError(
                    item,
                    "replica_does_not_fit",
                    f"reservation '{rid}' holds {rsv.gpu_count} GPU(s) on one node, a replica "
                    f"needs {b.gpus_per_replica}; lower gpus_per_replica or use a larger "
                    "reservation",
                )
            )
        problems.extend(found)
    return problems
