"""Request and response bodies of the schedule API, as they appear in the OpenAPI document.

Schedule documents themselves are validated by the domain (``load_schedule``),
not by these models, so the API refuses them with the same field paths,
reasons and fixes as the CLI.
"""

# Decisions embodied here (docs/decisions.md):
# * “Instants in requests are bounded as documents bound them”

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
)
from pydantic_core import PydanticCustomError

from gps_dagster.api.errors import FieldProblem
from gps_dagster.domain.spec import EARLIEST, LATEST


def in_range(value: datetime) -> datetime:
    """Instants are bounded as documents bound them (year 1 or 9999 overflowed the evaluator)."""
    if not EARLIEST <= value < LATEST:
        raise PydanticCustomError(
            "instant_out_of_range",
            f"use an instant from {EARLIEST.date()} to before {LATEST.date()}, e.g. "
            "2026-10-21T13:00:00+07:00",
        )
    return value


Instant = Annotated[AwareDatetime, AfterValidator(in_range)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduleOut(BaseModel):
    name: str = Field(description="The name on this surface (unique within its scope).")
    id: str = Field(
        description="The identity the CLI and Dagster show: the name, qualified by the "
        "project on a tenant surface (``vision/gpu42-shared``)."
    )
    version: int = Field(description="Bumped by every change; send it back in If-Match.")
    scope: str
    enabled: bool
    created_at: AwareDatetime
    updated_at: AwareDatetime
    document: dict[str, Any] = Field(description="The schedule as stored.")
    warnings: list[FieldProblem] = Field(
        default_factory=list,
        description="Fields dropped from the request (tenant placement fields, Q5).",
    )


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_page_token: str | None = Field(
        description="Pass as page_token for the next page; null at the end."
    )


class LastAction(BaseModel):
    step: str
    state: str
    reason: str | None


class TargetStatus(BaseModel):
    target: str
    phase: str
    reason: str | None
    fix: str | None
    interval_start: str | None
    interval_end: str | None
    intent: dict[str, Any] | None
    last_action: LastAction | None
    since: str


class StatusOut(BaseModel):
    schedule: str
    version: int
    gate: str = Field(description="The execution gate: off | observe | enforce.")
    targets: list[TargetStatus]


class Interval(BaseModel):
    start: str
    end: str | None
    desired_state: str
    replicas: int | None
    allow_downtime: bool
    source: str = Field(description="The window in force, or 'default'.")


class GpuPoint(BaseModel):
    start: str
    end: str
    desired_gpus: int
    capacity: int
    overcommit: bool = False


class Occurrence(BaseModel):
    start: str
    end: str


class SkippedOccurrence(BaseModel):
    start: str
    end: str
    reason: str = Field(description="The holiday's name, or 'listed date'.")


class SkippedDay(BaseModel):
    window: str
    start: str
    end: str
    date: str = Field(description="The local date the occurrence would have started on.")
    reason: str = Field(description="The holiday's name, or 'listed date'.")
    calendar: str | None = Field(
        default=None, description="e.g. 'VN public'; null for a listed date."
    )
    decided_by: str | None = Field(
        default=None, description="The holidays package version that decided."
    )


class WindowBand(BaseModel):
    name: str
    kind: str
    priority: int
    targets: list[str]
    occurrences: list[Occurrence]
    skipped: list[SkippedOccurrence] | None = Field(
        default=None,
        description="Occurrences its skip removed (holidays, listed dates); null without a skip.",
    )


class TimelineOut(BaseModel):
    schedule: str
    timezone: str
    from_: str = Field(alias="from")
    to: str
    targets: dict[str, list[Interval]]
    gpu: list[GpuPoint] | None = Field(
        default=None, description="Desired GPUs vs capacity; null without a pool."
    )
    windows: list[WindowBand]
    skipped: list[SkippedDay] | None = Field(
        default=None,
        description="Occurrences removed by skips in the range; null when no window skips.",
    )
    ready_by: list[dict[str, Any]] | None = Field(
        default=None,
        description="Planned early starts (boundary, early_start, lead_s, reason, figures); "
        "null without ready_by.",
    )

    model_config = ConfigDict(populate_by_name=True)


class DryRunIn(Strict):
    """An instant (``at``) or a range (``from`` + ``to``); ``schedule`` dry-runs an unsaved edit."""

    at: Instant | None = None
    from_: Instant | None = Field(default=None, alias="from")
    to: Instant | None = None
    schedule: dict[str, Any] | None = Field(
        default=None, description="An edited schedule document."
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DryRunAt(BaseModel):
    schedule: str
    at: str
    intents: dict[str, dict[str, Any]]
    steps: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    ready_by: list[dict[str, Any]] | None = Field(
        default=None,
        description="Ready-by leads in force or in the day ahead; null without ready_by.",
    )


class DryRunOut(BaseModel):
    schedule: str
    version: int | None = Field(description="The stored version dry-run; null for an unsaved edit.")
    instant: DryRunAt = Field(description="The plan at ``at`` (or at ``from`` for a range).")
    boundaries: list[DryRunAt] = Field(
        default_factory=list,
        description="A range: the plan at every intent boundary after ``from``.",
    )
    warnings: list[dict[str, Any]] = Field(
        default_factory=list, description="Overcommit over the range."
    )


class StepOut(BaseModel):
    target: str
    state: str
    phase: str | None
    reason: str | None
    fix: str | None


class ScheduleOutcome(BaseModel):
    schedule: str
    version: int
    opened: int
    refused: int


class ApplyNowOut(BaseModel):
    at: str
    gate: str
    schedules: list[ScheduleOutcome]
    steps: list[StepOut]


class AuditEntry(BaseModel):
    id: int
    at: AwareDatetime
    actor: str
    actor_token_id: str | None = Field(
        default=None,
        description="The id of the API token that made the write (null: the CLI, the system).",
    )
    action: str
    object_kind: str
    object_name: str
    scope: str | None
    version: int | None
    detail: dict[str, Any] | None


class AuditPage(BaseModel):
    items: list[AuditEntry]
    next_page_token: str | None


class Member(BaseModel):
    deploy_id: str
    memory_mib: int | None
    state: str


class ReservationOut(BaseModel):
    id: str
    state: str
    generation: int
    node: str
    namespace: str
    mode: str
    gpus: list[str]
    gpu_memory_mib: int
    headroom: str
    budget_mib: int = Field(
        description="floor(GPU memory × headroom): e.g. 143771 × 0.95 = 136582."
    )
    members: list[Member]


class ReservationList(BaseModel):
    items: list[ReservationOut]


class AdmissionIn(Strict):
    deploy_id: StrictStr = Field(min_length=1, max_length=200)
    memory_mib: StrictInt = Field(ge=1, le=10_000_000, description="The changed memory_mib to try.")
    at: Instant | None = Field(
        default=None, description="Whose members run: intents at this instant."
    )
    schedule: StrictStr | None = Field(
        default=None, max_length=128, description="The schedule deciding intents."
    )


class AdmissionOut(BaseModel):
    reservation_id: str
    deploy_id: str
    memory_mib: int
    admitted: bool
    reason: str | None
    fix: str | None
    budget_mib: int
    running_mib: int
    proposed_mib: int
    total_mib: int
    members: list[Member]


GPU_UUID_PATTERN = (
    "^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
"""What ``nvidia-smi -L`` prints (the reservation file's rule, ``invalid_gpu_uuid``), as a schema
says it."""


_GPU_UUID = re.compile(GPU_UUID_PATTERN)


def _gpu_uuid(value: str) -> str:
    if not _GPU_UUID.fullmatch(value):  # fullmatch: `$` alone would take a trailing newline
        raise PydanticCustomError(
            "invalid_gpu_uuid",
            "use the UUID nvidia-smi -L prints, e.g. GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3",
        )
    return value


class RepinIn(Strict):
    gpu_uuids: list[
        Annotated[
            str, AfterValidator(_gpu_uuid), Field(json_schema_extra={"pattern": GPU_UUID_PATTERN})
        ]
    ] = Field(min_length=1, max_length=64, json_schema_extra={"uniqueItems": True})
    generation: int = Field(ge=1, description="The generation you read (the fence of R-GPS-9).")
