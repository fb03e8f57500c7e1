"""What the planner reads and reports, as values: the prefetch of a pass (statuses, deploys,
in-flight steps of a page of schedules), a target that may join a plan, a schedule's outcome,
and the planner's views of a deploy and of an intent (``domain/planner.py``'s inputs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gps_dagster.domain.evaluator import IntentInterval
from gps_dagster.domain.planner import Observed, PlannedStep, Wanted
from gps_dagster.domain.readyby import Lead
from gps_dagster.ports import DeployState, DeployView
from gps_dagster.store.records import ActionRow, TargetStatusRow

RUNNING_STATES = frozenset({DeployState.READY, DeployState.STARTING, DeployState.UPDATING})


def observed(deploy: DeployView) -> Observed:
    return Observed(deploy.id, deploy.state in RUNNING_STATES, deploy.desired_replicas)


def wanted(interval: IntentInterval) -> Wanted:
    i = interval.intent
    return Wanted(interval.target, i.desired_state, i.replicas, i.allow_downtime)


def intent_doc(interval: IntentInterval) -> dict[str, Any]:
    i = interval.intent
    return {
        "desired_state": i.desired_state.value,
        "replicas": i.replicas,
        "allow_downtime": i.allow_downtime,
        "source": i.source,
    }


@dataclass
class Prefetch:
    """One pass's batched reads: statuses, deploys and in-flight steps of a page of schedules."""

    statuses: dict[tuple[str, str], TargetStatusRow]
    reads: dict[str, DeployView]
    in_flight: dict[str, list[ActionRow]]

    refreshed: set[str] = field(default_factory=set)
    """Schedules whose statuses were read again after their in-flight steps were observed."""
    pins: dict[str, str | None] | None = None
    """The claims' pinned instances by deploy id (``Store.pins_for``), read once for the batch;
    None: read per target when needed."""

    def dirty(self, schedule: str) -> bool:
        """In-flight steps may have moved its statuses since the prefetch: re-read them."""
        return bool(self.in_flight.get(schedule))

    def status(self, schedule: str, target: str) -> TargetStatusRow | None:
        """The prefetched status when it is still current (None: read it now)."""
        if self.dirty(schedule) and schedule not in self.refreshed:
            return None
        return self.statuses.get((schedule, target))


@dataclass
class Candidate:
    status: TargetStatusRow
    deploy: DeployView
    interval: IntentInterval
    steps: tuple[PlannedStep, ...] = ()


@dataclass
class ScheduleOutcome:
    """What one schedule's pass did (for reports, sensors and tests)."""

    schedule: str
    version: int
    opened: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    ineligible: dict[str, str] = field(default_factory=dict)
    blocking: dict[str, str] = field(default_factory=dict)
    """Ineligible targets whose new interval wants them running: they refuse the plan."""
    observing: list[str] = field(default_factory=list)
    behind: list[str] = field(default_factory=list)
    """Targets whose stored interval is ahead of this pass's clock: nothing planned (R-PASS-14)."""
    errors: list[str] = field(default_factory=list)
    lead: Lead | None = None
    """The ready-by lead this visit planned early for (R-NEXT-1), if any."""
