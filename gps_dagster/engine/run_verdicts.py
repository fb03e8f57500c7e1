"""What a run's ops decide and say about a step, without Dagster: the admit op's bounded
capacity watch, when a step's outcome fails its op, and the lines the ops log. The Dagster
layer turns a verdict into an output, a skipped output or a ``Failure``.
"""

# Decisions embodied here (docs/decisions.md):
# * “Under the sensor floor by watching, briefly”
# * “A deferred acquire is a skipped step, not a green one”
# * “The Dagster layer translates; the engine decides what a tick launches and says”
# * “The ops' and ticks' remaining rules are the engine's; one factory per kind of op”

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gps_dagster.domain.step_state import BROKEN, StepState
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.sensor_health import CAPACITY_WAIT
from gps_dagster.ports import Clock

POLL_EVERY_S = 0.5
ACQUIRED = (StepState.ACCEPTED, StepState.CONVERGED)


@dataclass(frozen=True)
class Admission:
    """``fits`` (→ acquire), ``wait`` (→ capacity_wait) or ``pending`` (neither: its releases
    were not submitted, the reconcile sensor resumes the plan); ``line`` for the op's log."""

    verdict: Literal["fits", "wait", "pending"]
    preview: StepOutcome
    line: str = ""


def admit(
    deploy_id: str,
    preview: Callable[[], StepOutcome],
    clock: Clock,
    watch_s: float,
    pause: Callable[[float], object],
) -> Admission:
    """Preview the step until it fits or ``watch_s`` has passed: GPUs freed by the release
    usually publish within seconds, under the floor of a sensor tick."""
    deadline = clock.now().timestamp() + watch_s
    while True:
        seen = preview()
        if seen.state == StepState.PENDING:
            why = seen.reason or "releases not submitted"
            line = (
                f"{deploy_id}: left pending ({why}): "
                "neither acquired nor waiting; the reconcile sensor resumes the plan"
            )
            return Admission("pending", seen, line)
        if seen.state != StepState.CAPACITY_WAIT:
            return Admission("fits", seen, f"{deploy_id}: {seen.state} → acquire")
        if clock.now().timestamp() >= deadline:
            return Admission("wait", seen)
        pause(POLL_EVERY_S)


def step_failure(order: str, step: str, deploy_id: str, outcome: StepOutcome) -> str | None:
    """Why the op that executed ``step`` fails, or None: a broken step, or an acquire whose
    previewed capacity was taken before the submit (never a green acquire that did not
    happen)."""
    if outcome.state in BROKEN:
        return f"{order} {step} of {deploy_id} failed: {outcome.reason or ''}"
    if order == "acquire" and outcome.state == StepState.CAPACITY_WAIT:
        return (
            f"acquire of {deploy_id} NOT submitted: the capacity it previewed was taken before "
            f"the submit; {CAPACITY_WAIT} launches it when it fits"
        )
    return None


def left_line(order: str, deploy_id: str, outcome: StepOutcome) -> str | None:
    """The warning of an op whose step neither failed nor reached its state."""
    if outcome.state in ACQUIRED:
        return None
    return f"{deploy_id}: {order} left {outcome.state} ({outcome.reason or ''})"


def deferred_line(deploy_id: str, reason: str, deadline: datetime | None) -> str:
    """The capacity_wait op's line: the acquire handed to the sensor, and until when."""
    by = deadline.isoformat() if deadline is not None else "its deadline"
    return (
        f"{deploy_id}: acquire DEFERRED to {CAPACITY_WAIT} "
        f"({reason or 'capacity not published yet'}); "
        f"capacity_unavailable if it does not fit by {by}"
    )


def batch_failure(steps: Sequence[tuple[str, str, str]]) -> str | None:
    """Why a batch run fails at its end, or None: the (deploy, state, reason) of each step
    that ended broken, the first twenty named."""
    failed = [f"{deploy} ({reason})" for deploy, state, reason in steps if state in BROKEN]
    return f"{len(failed)} step(s) ended: {', '.join(failed[:20])}" if failed else None
