"""Whether a plan still stands: what a run checks before it acts on a plan it was handed.

A Dagster run carries its plan in its run config, frozen when the run was requested. By the
time it executes — a re-execution of a failed run an hour later ("Re-execute all"), a run
launched ahead of its boundary (``dagster_defs/prearm.py``), a run queued behind a busy
daemon — a later boundary, an edit or a delete may have replaced that plan. The steps then
answer ``converged`` (done in an earlier run) or ``superseded`` and an op that took those
answers at face value went green with no pool operation made (R-NEXT-3). These functions
say, from the store alone, whether the plan is still the one its targets follow, and if not,
by what it was replaced: the reason an op ends with ("superseded by plan … at …").
"""

# Decisions embodied here (docs/decisions.md):
# * “A run re-checks its plan before it acts”

from __future__ import annotations

from dataclasses import dataclass

from gps_dagster.domain.step_state import PlanState
from gps_dagster.engine.store_ports import StepStore
from gps_dagster.store.records import ActionRow, TransitionRow


@dataclass(frozen=True, slots=True)
class Standing:
    """A plan's (or a step's) standing: ``live``, or why it no longer stands."""

    transition_id: str
    live: bool
    reason: str = ""
    """``superseded`` | ``schedule_deleted`` | ``schedule_version_changed`` |
    ``schedule_disabled`` | ``plan_done`` | ``plan_failed`` | ``plan_superseded`` |
    ``unknown_plan``; empty when live."""
    message: str = ""
    """One line for an operator: what replaced the plan and when."""
    fix: str = ""
    superseded_by: str | None = None
    """The plan the targets follow now, when one replaced this one."""


def plan_standing(store: StepStore, transition_id: str) -> Standing:
    """Whether plan ``transition_id`` is still the plan its targets follow.

    Checked in this order: a newer plan named by a target's status (the most useful answer:
    which plan, which boundary, when it opened), the schedule's current version and
    enabled flag, then the plan's own state (closed = every step finished earlier)."""
    tr = store.get_transition(transition_id)
    if tr is None:
        return Standing(
            transition_id,
            False,
            "unknown_plan",
            f"plan {transition_id} is not in the product store (pruned, or another database)",
            "check GPS_DB_URL of the run against the daemon's",
        )
    newer = _newer_plan(store, tr)
    if newer is not None:
        return _superseded(transition_id, newer)
    stale = _stale(store, tr.schedule, tr.schedule_version)
    if stale is not None:
        return Standing(transition_id, False, stale[0], stale[1], _NEW_PLAN_FIX)
    if tr.state != PlanState.OPEN:
        return Standing(
            transition_id,
            False,
            f"plan_{tr.state}",
            f"plan {transition_id} is closed ({tr.state}): its steps finished in earlier runs; "
            "running it again would make no pool operation",
            f"to act on the current intent: gps-dagster apply-now {tr.schedule}",
        )
    return Standing(transition_id, True)


def step_standing(store: StepStore, step: ActionRow) -> Standing:
    """Why a ``superseded`` step was superseded, naming the plan that replaced it."""
    tr = store.get_transition(step.transition_id)
    newer = _newer_plan(store, tr) if tr is not None else None
    if newer is not None:
        return _superseded(step.transition_id, newer)
    stale = _stale(store, step.schedule, step.schedule_version)
    if stale is not None:
        return Standing(step.transition_id, False, stale[0], stale[1], _NEW_PLAN_FIX)
    reason = step.reason or "superseded"
    return Standing(
        step.transition_id,
        False,
        reason,
        f"step {step.id} of {step.deploy_id} was superseded ({reason})",
        _NEW_PLAN_FIX,
    )


_NEW_PLAN_FIX = "nothing to run again: the engine opens a new plan for the current intent"


def _newer_plan(store: StepStore, tr: TransitionRow) -> TransitionRow | None:
    """The plan a target of ``tr`` follows now, if it is another (the newest such)."""
    found: list[TransitionRow] = []
    for deploy_id in tr.targets:
        status = store.get_status(tr.schedule, deploy_id)
        if status is None or status.transition_id in (None, tr.id):
            continue
        other = store.get_transition(status.transition_id)
        if other is not None:
            found.append(other)
    return max(found, key=lambda x: x.created_at) if found else None


def _superseded(transition_id: str, newer: TransitionRow) -> Standing:
    message = (
        f"superseded by plan {newer.id} (boundary {newer.boundary_at.isoformat()}, "
        f"{newer.trigger}) at {newer.created_at.isoformat()}"
    )
    fix = f"nothing to run again: plan {newer.id} serves the targets (runs tagged gps/transition)"
    return Standing(transition_id, False, "superseded", message, fix, newer.id)


def _stale(store: StepStore, schedule: str, version: int) -> tuple[str, str] | None:
    current = store.schedule_state(schedule)
    if current is None:
        return "schedule_deleted", f"schedule {schedule} was deleted since the plan opened"
    now_version, enabled = current
    if now_version != version:
        return (
            "schedule_version_changed",
            f"schedule {schedule} was edited since the plan opened (version {version} → "
            f"{now_version})",
        )
    if not enabled:
        return "schedule_disabled", f"schedule {schedule} was disabled since the plan opened"
    return None
