"""Every exception of a step has one owner (R-PASS-15; as kopf's ``execute_handler_once``).

Modelled on kopf's ``execute_handler_once``: ONE function, ``judge``, maps
whatever a step raised to an outcome — a retry bounded by the step's own
clock, or a terminal verdict with a reason and a fix — and looks ahead: a
retry that could only happen past the step's deadline ends the step now.

* ``StoreUnavailable`` (the database is down): retry, and write nothing — the
  store is what failed. The step's clocks keep running, so it is judged on its
  deadline once the database is back.
* ``Transient`` and every other ``TemporaryError``: retry until the deadline,
  then the step's timeout phase, reason ``core_unreadable`` (``witness_unavailable`` when the
  core's witness read refused a stale record: the fix is the node agent's, not the API's).
* every other ``CoreError`` / ``PermanentError`` (``NotFound`` included):
  terminal now, mapped by ``outcomes.from_core_error``.
* anything else (a bug, an untranslated library error): retried like a
  temporary error — submits are idempotent, and a one-off glitch must not end
  a swap — with the traceback logged and a ``step_retry`` event each time;
  at the deadline, terminal with reason ``engine_error``.

A step's clock depends on where it stands: accepted → its deadline; submitting
→ submitted + stop/readiness timeout; an acquire not yet submitted → its
capacity deadline; a release not yet submitted → first failed attempt + stop
timeout (kept in ``detail.retry_since``).
"""

# Decisions embodied here (docs/decisions.md):
# * “Clocks run while the core is silent”
# * “Unknown exceptions in a step are retried, not terminal”
# * “A database outage stops the pass, not the engine”
# * “The node agent's heartbeat is a stamp on the pods it publishes”

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gps_dagster.domain.errors import GpsError, PermanentError, TemporaryError
from gps_dagster.domain.gps.witness import WITNESS_UNAVAILABLE
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_state import REACHED_CORE, StepState
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.outcomes import Verdict, from_core_error
from gps_dagster.engine.planning import capacity_deadline
from gps_dagster.ports import CoreError, Transient
from gps_dagster.store.errors import StoreUnavailable
from gps_dagster.store.records import ActionRow

FIXES = {
    "core_unreadable": (
        "check that the control plane answers (its API, network, credentials), then apply-now"
    ),
    "temporary_error": "check the control plane and the database, then apply-now",
    WITNESS_UNAVAILABLE: (
        "the placement witness is stale: get the node agent of the pod's node running again "
        "(the chart's node-agent DaemonSet), then apply-now"
    ),
    "engine_error": (
        "an unexpected engine error: see the engine log and the step_retry events, report it, "
        "then apply-now"
    ),
}


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the step again later; ``write`` is False when nothing may be written now."""

    reason: str
    message: str
    deadline: datetime | None
    write: bool = True


@dataclass(frozen=True, slots=True)
class End:
    """The step ends terminal now."""

    verdict: Verdict


@dataclass(frozen=True, slots=True)
class StepClock:
    """A step's deadline and the phase it ends in when the deadline passes."""

    deadline: datetime
    phase: Phase


def clock_of(
    a: ActionRow, config: EngineConfig, *, now: datetime, opened_at: datetime
) -> StepClock:
    """The step's own clock, from where it stands now."""
    release = a.order == Order.RELEASE
    timeout = Phase.STOP_TIMEOUT if release else Phase.READINESS_TIMEOUT
    limit = timedelta(seconds=config.stop_timeout_s if release else config.readiness_timeout_s)
    if a.state == StepState.ACCEPTED and a.deadline_at is not None:
        return StepClock(a.deadline_at, timeout)
    if a.state in REACHED_CORE:
        return StepClock((a.submitted_at or now) + limit, timeout)
    if not release:
        if a.deadline_at is not None:
            return StepClock(a.deadline_at, Phase.CAPACITY_UNAVAILABLE)
        deadline = capacity_deadline(
            a.interval_start, opened_at, a.planned.interval_end, config.capacity_wait_s
        )
        return StepClock(deadline, Phase.CAPACITY_UNAVAILABLE)
    return StepClock((a.retry_since or now) + limit, Phase.STOP_TIMEOUT)


def judge(
    exc: Exception, *, step: ActionRow, now: datetime, clock: StepClock, retry_in_s: float
) -> Retry | End:
    """The outcome of ``exc`` raised while handling ``step`` (the one mapping, R-PASS-15)."""
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, StoreUnavailable):
        return Retry(exc.reason, error, clock.deadline, write=False)
    if isinstance(exc, CoreError | PermanentError) and not isinstance(
        exc, Transient | TemporaryError
    ):
        if isinstance(exc, CoreError):
            return End(from_core_error(exc))
        return End(_permanent(exc))
    reason = _temporary_reason(exc)
    too_late = (
        now + timedelta(seconds=retry_in_s) > clock.deadline
    )  # the next try: past the deadline?
    if too_late:  # then end now
        return End(late(step, clock, reason=reason, error=error))
    return Retry(reason, error, clock.deadline)


def late(step: ActionRow, clock: StepClock, *, reason: str, error: str) -> Verdict:
    """The terminal verdict of a step whose clock ran out while it kept failing."""
    submitted = step.state in REACHED_CORE
    what = f"{step.deploy_id} {step.step}"
    left = "" if submitted else f"; {step.deploy_id} was left as it is"
    extra = f"{what} kept failing until {clock.deadline.isoformat()} ({error}){left}"
    return Verdict(clock.phase, reason, f"{extra} — {FIXES.get(reason, FIXES['engine_error'])}")


def _temporary_reason(exc: Exception) -> str:
    if isinstance(exc, Transient):
        return WITNESS_UNAVAILABLE if exc.reason == WITNESS_UNAVAILABLE else "core_unreadable"
    if isinstance(exc, TemporaryError):
        return "temporary_error"
    return "engine_error"


def _permanent(exc: GpsError) -> Verdict:
    reason = str(getattr(exc, "reason", "") or "permanent_error")
    fix = str(getattr(exc, "fix", "") or FIXES["engine_error"])
    return Verdict(Phase.INELIGIBLE, reason, f"{type(exc).__name__}: {exc} — {fix}")
