"""Reservation values (R-GPS-1): specific GPUs of one node, lent to one namespace.

A reservation file (YAML/JSON) holds a ``ReservationSpec``; the ledger adds
what the server owns: ``generation`` (the fence of R-GPS-9), the lifecycle
``state`` and ``created_at``. The VRAM budget is integer arithmetic on a
``Decimal`` headroom, because ``143771 * 0.95`` in binary floating point is
one rounding away from a budget that is off by a MiB at the boundary.
"""

# Decisions embodied here (docs/decisions.md):
# * “Exact budget arithmetic”
# * “A time-sliced reservation holds exactly one GPU”
# * “Identifier patterns end with `\Z`, not `$`”

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, Field, field_validator

from gps_dagster.domain.documents import FieldErrorCarrier, build, parse_text
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.models import Frozen

DEFAULT_HEADROOM = Decimal("0.95")
_GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


def _check_gpu_uuid(value: str) -> str:
    if not _GPU_UUID.match(value):
        raise FieldErrorCarrier(
            "invalid_gpu_uuid",
            "use the UUID nvidia-smi -L prints, e.g. GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3",
        )
    return value


GpuUuid = Annotated[str, AfterValidator(_check_gpu_uuid)]
"""An NVIDIA GPU UUID, ``GPU-`` followed by a canonical UUID."""


class SharingMode(StrEnum):
    EXCLUSIVE = "exclusive"
    """Whole GPUs per replica; no VRAM budget applies."""
    TIME_SLICED = "time_sliced"
    """Several members on one GPU, compute time-sliced, VRAM admitted against the budget."""


class ReservationState(StrEnum):
    ACTIVE = "ACTIVE"
    DEGRADED = "DEGRADED"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"


BILLED_STATES = frozenset({ReservationState.ACTIVE})
"""States in which reservation-hours accrue (R-GPS-8, seed Q3)."""


def format_mib(value: int) -> str:
    """``136582`` → ``136 582``: the seed's way of writing MiB, readable in fix texts."""
    return f"{value:,}".replace(",", " ")


def budget_mib(gpu_memory_mib: int, headroom: Decimal) -> int:
    """``floor(gpu_memory_mib × headroom)``, exact: H200 143 771 × 0.95 → 136 582."""
    return int((Decimal(gpu_memory_mib) * headroom).to_integral_value(rounding=ROUND_FLOOR))


class ReservationSpec(Frozen):
    """What an operator writes in a reservation file."""

    id: str = Field(description="Ledger id, a DNS label, e.g. ``rsv-gpu42-shared``.")
    node: str = Field(description="The single node holding the GPUs, e.g. ``hla-worker-042``.")
    gpu_uuids: tuple[GpuUuid, ...] = Field(
        min_length=1, description="NVIDIA GPU UUIDs, ``GPU-<uuid>``."
    )
    namespace: str = Field(description="Namespace the members run in, e.g. ``cmp-vision``.")
    mode: SharingMode
    gpu_memory_mib: int = Field(
        ge=1, le=10_000_000, strict=True, description="Memory of one GPU in MiB (H200: 143771)."
    )
    headroom: Decimal = Field(
        default=DEFAULT_HEADROOM,
        description="Fraction of GPU memory admission may hand out (time-sliced budget).",
    )

    @field_validator("id", "namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise FieldErrorCarrier(
                "invalid_name", "use a DNS label: lowercase letters, digits and '-', at most 63"
            )
        return value

    @field_validator("node")
    @classmethod
    def _node_name(cls, value: str) -> str:
        if not _NODE_NAME.match(value):
            raise FieldErrorCarrier(
                "invalid_node", "use the node's Kubernetes name, e.g. hla-worker-042"
            )
        return value

    @field_validator("headroom", mode="after")
    @classmethod
    def _headroom(cls, value: Decimal) -> Decimal:
        if not value.is_finite() or not Decimal(0) < value <= Decimal(1):
            raise FieldErrorCarrier("invalid_headroom", "use a fraction in (0, 1], e.g. 0.95")
        return value

    @property
    def budget_mib(self) -> int:
        """VRAM admission budget of a time-sliced reservation (R-GPS-3)."""
        return budget_mib(self.gpu_memory_mib, self.headroom)

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_uuids)


class Reservation(ReservationSpec):
    """A reservation as the ledger holds it."""

    generation: int = Field(
        default=1, ge=1, description="Bumped by every re-pin; the fence of R-GPS-9."
    )
    state: ReservationState = ReservationState.ACTIVE
    created_at: AwareDatetime

    @classmethod
    def from_spec(cls, spec: ReservationSpec, *, at: datetime) -> Reservation:
        return cls(**spec.model_dump(), created_at=at)

    def spec(self) -> ReservationSpec:
        return ReservationSpec(**self.model_dump(include=set(ReservationSpec.model_fields)))


def _spec_checks(spec: ReservationSpec) -> list[FieldError]:
    problems: list[FieldError] = []
    problems.extend(duplicate_uuid_errors(spec.gpu_uuids, "gpu_uuids"))
    if spec.mode is SharingMode.TIME_SLICED and len(spec.gpu_uuids) != 1:
        problems.append(
            FieldError(
                "gpu_uuids",
                "time_sliced_multi_gpu",
                "a time-sliced reservation holds exactly one GPU (its budget is per GPU); "
                "create one reservation per GPU",
            )
        )
    return problems


def duplicate_uuid_errors(uuids: Iterable[str], path: str) -> list[FieldError]:
    """One ``duplicate_gpu_uuid`` error per repeated UUID (compared case-insensitively)."""
    seen: dict[str, int] = {}
    out: list[FieldError] = []
    for i, value in enumerate(uuids):
        key = value.lower()
        if key in seen:
            out.append(
                FieldError(
                    f"{path}[{i}]",
                    "duplicate_gpu_uuid",
                    f"already listed as {path}[{seen[key]}]; list each GPU once",
                )
            )
        seen.setdefault(key, i)
    return out


def load_reservation_spec(data: Any, *, source: str = "<reservation>") -> ReservationSpec:
    """Validate a parsed reservation document; every problem is a ``SpecInvalid`` field error."""
    return build(ReservationSpec, data, source=source, checks=_spec_checks)


def parse_reservation_spec(text: str, *, source: str = "<reservation>") -> ReservationSpec:
    """Parse and validate reservation text (YAML or JSON)."""
    return load_reservation_spec(parse_text(text, source=source), source=source)
