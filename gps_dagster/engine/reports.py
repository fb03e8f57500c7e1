"""What the engine hands back to its callers (CLI, Dagster sensors and ops, tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gps_dagster.engine.plan_inputs import ScheduleOutcome


@dataclass(frozen=True, slots=True)
class StepRef:
    step_id: str
    deploy_id: str
    step: str
    """``stop`` | ``scale_down`` | ``start`` | ``scale_up``."""
    order: str
    """``release`` | ``acquire``."""


@dataclass(frozen=True, slots=True)
class PlanRef:
    """A transition plan, as the Dagster transition job receives it in run config."""

    transition_id: str
    schedule: str
    schedule_version: int
    interval_start: datetime
    targets: tuple[str, ...]
    release_steps: tuple[StepRef, ...]
    acquire_steps: tuple[StepRef, ...]
    trigger: str
    order: str = "release_first"


@dataclass(frozen=True, slots=True)
class StepOutcome:
    step_id: str
    deploy_id: str
    state: str
    """accepted | converged | capacity_wait | submitting | pending | failed | skipped | superseded |
    cancelled."""
    phase: str | None = None
    reason: str | None = None
    fix: str | None = None

    @property
    def failed(self) -> bool:
        return self.state in ("failed", "cancelled")


@dataclass
class PassReport:
    at: datetime
    trigger: str
    busy: bool = False
    gate: str = "off"
    schedules: list[ScheduleOutcome] = field(default_factory=list)
    plans: list[PlanRef] = field(default_factory=list)
    steps: list[StepOutcome] = field(default_factory=list)
    cursor: str | None = None
    errors: list[str] = field(default_factory=list)
    """Schedules whose visit raised (each logged with its traceback and an event); the others
    ran."""
    stopped: bool = False
    """The pass ended early on request (SIGTERM/SIGINT of ``engine run``), between schedules."""
