"""Frozen rows the store hands out: callers never see SQLAlchemy objects.

The enumerated columns come out as the domain's enums (``Phase``, ``StepKind``, ``Order``,
``StepState``, ``TransitionOrder``, ``PlanState``), converted once where a store builds the
row; each member equals its column text, so comparing with the text and writing it back are
unchanged.
"""
# Decisions embodied here (docs/decisions.md):
# * “Step states, plan states and the gate are enums on the rows; plans open from frozen records”
# * “A step's plan is a typed record; its detail keys are spelled once”

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, StepKind
from gps_dagster.domain.spec import Schedule, TransitionOrder
from gps_dagster.domain.step_plan import RETRY_SINCE, UNSCHEDULABLE_SINCE, StepPlan, instant
from gps_dagster.domain.step_state import PlanState, StepState


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    name: str
    version: int
    spec: Schedule
    enabled: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class TargetStatusRow:
    schedule: str
    deploy_id: str
    phase: Phase
    reason: str | None
    fix: str | None
    detail: dict[str, Any] | None
    status_version: int
    target_generation: int
    schedule_version: int
    interval_start: datetime | None
    interval_end: datetime | None
    intent: dict[str, Any] | None
    transition_id: str | None
    last_action: str | None
    phase_since: datetime
    converged_at: datetime | None
    updated_at: datetime
    interval_writer: str | None = None
    """The replica (engine holder) that wrote ``interval_start``."""
    interval_writer_offset_s: float | None = None
    """That replica's clock minus the database's clock when it wrote it (None: not measured)."""


@dataclass(frozen=True, slots=True)
class ActionRow:
    id: str
    idempotency_key: str
    transition_id: str
    schedule: str
    schedule_version: int
    deploy_id: str
    interval_start: datetime
    step: StepKind
    order: Order
    seq: int
    replicas: int | None
    delta_replicas: int | None
    etag_used: str | None
    state: StepState
    operation_ids: list[str] | None
    reason: str | None
    fix: str | None
    detail: dict[str, Any] | None
    created_at: datetime
    submitted_at: datetime | None
    accepted_at: datetime | None
    finished_at: datetime | None
    deadline_at: datetime | None
    updated_at: datetime

    @property
    def planned(self) -> StepPlan:
        """What the planner recorded in ``detail`` when the step's plan opened."""
        return StepPlan.of(self.detail)

    @property
    def retry_since(self) -> datetime | None:
        """When this release, not yet submitted, first failed (its clock starts there)."""
        return instant(self.detail, RETRY_SINCE)

    @property
    def unschedulable_since(self) -> datetime | None:
        """When this accepted acquire's pods were first seen unschedulable."""
        return instant(self.detail, UNSCHEDULABLE_SINCE)


@dataclass(frozen=True, slots=True)
class TransitionRow:
    id: str
    schedule: str
    schedule_version: int
    boundary_at: datetime
    order: TransitionOrder
    trigger: str
    state: PlanState
    targets: list[str]
    created_at: datetime
    lag_seconds: float | None


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    at: datetime
    schedule: str | None
    deploy_id: str | None
    kind: str
    phase: str | None
    reason: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ApplyNowRequest:
    id: int
    schedule: str
    actor: str
    requested_at: datetime
    state: str
    result: str | None
    handled_at: datetime | None


@dataclass(frozen=True, slots=True)
class Deleted:
    """What ``delete_schedule`` removed: the version, and the in-flight steps it abandoned."""

    version: int
    abandoned: list[str]
