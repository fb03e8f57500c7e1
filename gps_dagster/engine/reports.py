"""What the engine hands back to its callers (CLI, Dagster sensors and ops, tests).

The step and plan values here travel in Dagster run config, op outputs and metadata, whose
serialiser refuses enums it has not registered: their step, order, state and phase fields hold
plain text, whatever enum member (``StepState``, ``StepKind``, ``Order``, ``Phase``) they were
built from.
"""
# Decisions embodied here (docs/decisions.md):
# * “Step states, plan states and the gate are enums on the rows; plans open from frozen records”

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gps_dagster.domain.step_state import BROKEN, Gate
from gps_dagster.engine.plan_inputs import ScheduleOutcome
from gps_dagster.ports import DeployView


def _as_text(record: object, *names: str) -> None:
    """Store ``names`` of a frozen ``record`` as plain ``str`` (an enum member's text; None
    stays None)."""
    for name in names:
        value = getattr(record, name)
        if value is not None:
            object.__setattr__(record, name, str(value))


@dataclass(frozen=True, slots=True)
class StepRef:
    step_id: str
    deploy_id: str
    step: str
    """``stop`` | ``scale_down`` | ``start`` | ``scale_up``."""
    order: str
    """``release`` | ``acquire``."""

    def __post_init__(self) -> None:
        _as_text(self, "step", "order")


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

    def __post_init__(self) -> None:
        _as_text(self, "order")


@dataclass(frozen=True, slots=True)
class StepOutcome:
    step_id: str
    deploy_id: str
    state: str
    """A ``StepState``'s text, or ``ready`` (a release a dry run would let go)."""
    phase: str | None = None
    reason: str | None = None
    fix: str | None = None

    def __post_init__(self) -> None:
        _as_text(self, "state", "phase")

    @property
    def failed(self) -> bool:
        return self.state in BROKEN


@dataclass
class PassReport:
    at: datetime
    trigger: str
    busy: bool = False
    gate: Gate = Gate.OFF
    schedules: list[ScheduleOutcome] = field(default_factory=list)
    plans: list[PlanRef] = field(default_factory=list)
    steps: list[StepOutcome] = field(default_factory=list)
    cursor: str | None = None
    errors: list[str] = field(default_factory=list)
    """Schedules whose visit raised (each logged with its traceback and an event); the others
    ran."""
    stopped: bool = False
    """The pass ended early on request (SIGTERM/SIGINT of ``engine run``), between schedules."""


@dataclass
class SecondHalves:
    """What the due path's batches leave for the pass's second halves: their schedules, the
    plans they opened (no release re-check), their reads and the steps already reported."""

    names: set[str] = field(default_factory=set)
    fresh: set[str] = field(default_factory=set)
    reads: dict[str, DeployView] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    def add(
        self,
        names: Iterable[str],
        fresh: Collection[str],
        reads: Mapping[str, DeployView],
        moved: Iterable[StepOutcome],
    ) -> None:
        self.names.update(names)
        self.fresh.update(fresh)
        self.reads.update(reads)
        self.done.update(o.step_id for o in moved)
