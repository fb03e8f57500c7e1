"""Transition plans: which steps take a target from what runs to what is wanted.

Pure: it compares the effective intent with an observation of the deploy and
orders the steps — every step that releases GPUs (stop, scale-down) before
every step that acquires GPUs (start, scale-up), unless the schedule opts
into ``acquire_first`` (SPEC R-PASS-8/9/12, R-SCALE-2). An acquiring step
carries the *delta* of replicas it needs, which is all the capacity preview
asks for (R-PASS-9).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gps_dagster.domain.spec import DesiredState, TransitionOrder


class StepKind(StrEnum):
    STOP = "stop"
    SCALE_DOWN = "scale_down"
    START = "start"
    SCALE_UP = "scale_up"


class Order(StrEnum):
    RELEASE = "release"
    ACQUIRE = "acquire"


RELEASING = frozenset({StepKind.STOP, StepKind.SCALE_DOWN})


@dataclass(frozen=True, slots=True)
class Observed:
    """What the control plane reports, reduced to what planning needs."""

    deploy_id: str
    running: bool
    """READY, STARTING or UPDATING (it holds or is acquiring GPUs)."""
    replicas: int
    """Desired replicas as stored on the deploy."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """The effective intent of one target, reduced to what planning needs."""

    deploy_id: str
    desired_state: DesiredState
    replicas: int | None
    """None = do not touch scale."""
    allow_downtime: bool


@dataclass(frozen=True, slots=True)
class PlannedStep:
    deploy_id: str
    kind: StepKind
    replicas: int | None
    """Replicas the deploy should end with (None for stop; start keeps the stored value)."""
    delta_replicas: int
    """Replica groups acquired (> 0) or released (< 0)."""
    persist_replicas: bool = False
    """Start of a STOPPED deploy with other replicas: persist them first (R-SCALE-5)."""

    @property
    def order(self) -> Order:
        return Order.RELEASE if self.kind in RELEASING else Order.ACQUIRE


def steps_for(wanted: Wanted, observed: Observed) -> tuple[PlannedStep, ...]:
    """The steps (zero or one) that bring ``observed`` to ``wanted``."""
    if wanted.desired_state is DesiredState.STOPPED:
        if observed.running:
            return (PlannedStep(wanted.deploy_id, StepKind.STOP, None, -observed.replicas),)
        return ()
    target = wanted.replicas if wanted.replicas is not None else observed.replicas
    if not observed.running:
        persist = wanted.replicas is not None and wanted.replicas != observed.replicas
        return (PlannedStep(wanted.deploy_id, StepKind.START, target, target, persist),)
    if target < observed.replicas:
        return (
            PlannedStep(wanted.deploy_id, StepKind.SCALE_DOWN, target, target - observed.replicas),
        )
    if target > observed.replicas:
        return (
            PlannedStep(wanted.deploy_id, StepKind.SCALE_UP, target, target - observed.replicas),
        )
    return ()


def matches(wanted: Wanted, observed: Observed) -> bool:
    """True when no step is needed (used for drift detection too)."""
    return not steps_for(wanted, observed)


def ordered(steps: Iterable[PlannedStep], order: TransitionOrder) -> list[PlannedStep]:
    """Release steps then acquire steps (or the reverse for ``acquire_first``), stable by deploy
    id."""
    first = Order.RELEASE if order is TransitionOrder.RELEASE_FIRST else Order.ACQUIRE
    return sorted(steps, key=lambda s: (s.order is not first, s.deploy_id))
