"""How steps end: failed (with their dependents), cancelled, superseded, converged — atomically.

Each ending is ONE store transaction (SPEC R-PASS-16, ``Store.write_each``):
the step's state, its target's status, the dependents cancelled with it (with
the failed step's *terminal* phase, never a copy of a status that may still
read ``releasing``), the events, and the transition's closing. A crash before
the commit leaves everything as it was, and the next engine decides again; a
crash after it leaves nothing half-written.
"""

# Decisions embodied here (docs/decisions.md):
# * “A failed step cancels the steps that were to follow it”

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from gps_dagster.domain.phases import Phase, is_terminal
from gps_dagster.domain.planner import Order
from gps_dagster.domain.spec import TransitionOrder
from gps_dagster.domain.step_state import IN_FLIGHT, UNSUBMITTED, StepState
from gps_dagster.engine.outcomes import Verdict
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.store_ports import StepStore
from gps_dagster.ports import Clock, DeployView
from gps_dagster.store.plans import StepWrite
from gps_dagster.store.records import ActionRow

PHASE = "phase"
"""``detail`` key of a failed or cancelled step: the terminal phase it gave its target."""


def first_order(transition_order: str | None) -> Order:
    """Which side of a plan runs first: ``release`` (release_first) or ``acquire``."""
    return Order.ACQUIRE if transition_order == TransitionOrder.ACQUIRE_FIRST else Order.RELEASE


class Endings:
    def __init__(self, store: StepStore, clock: Clock) -> None:
        self.store, self.clock = store, clock

    def fail(self, a: ActionRow, v: Verdict) -> StepOutcome:
        """The step ends terminal with ``v``; the steps that were to follow it are cancelled."""
        now = self.clock.now()
        write = StepWrite(
            a.id,
            IN_FLIGHT,
            {
                "state": StepState.FAILED,
                "reason": v.reason,
                "fix": v.fix,
                "finished_at": now,
                "detail": {**(a.detail or {}), **(v.detail or {}), PHASE: v.phase.value},
            },
            status=v.changes(),
        )
        write = replace(write, dependents=tuple(self._dependents(a, v, now)))
        self.store.write_each([write], now=now)
        return StepOutcome(a.id, a.deploy_id, StepState.FAILED, v.phase.value, v.reason, v.fix)

    def cancel(self, a: ActionRow, culprit: ActionRow) -> StepOutcome:
        """``a`` cannot run because ``culprit`` (a step before it) failed or was cancelled."""
        now = self.clock.now()
        phase = self._phase_of(culprit)
        v = Verdict(phase, culprit.reason or phase.value, culprit.fix or "")
        self.store.write_each([_cancellation(a, culprit, v, now)], now=now)
        return StepOutcome(a.id, a.deploy_id, StepState.CANCELLED, phase.value, v.reason, v.fix)

    def finish(self, a: ActionRow, state: StepState, reason: str) -> None:
        """The step will never run (``superseded``): drop it and close its plan if that was all."""
        now = self.clock.now()
        changes = {"state": state, "reason": reason, "finished_at": now}
        self.store.write_each(
            [StepWrite(a.id, (*UNSUBMITTED, StepState.SUBMITTING), changes)], now=now
        )

    def converge(self, a: ActionRow, deploy: DeployView) -> bool:
        """The deploy shows what the step asked for: step, status and plan move together."""
        now = self.clock.now()
        return a.id in self.store.write_each([self.convergence(a, deploy, now)], now=now)

    @staticmethod
    def convergence(a: ActionRow, deploy: DeployView, now: datetime) -> StepWrite:
        """The write of step ``a`` converging on ``deploy``."""
        status = {
            "phase": Phase.CONVERGED.value,
            "reason": None,
            "fix": None,
            "converged_at": now,
            "detail": {
                "observed_state": deploy.state.value,
                "ready_replicas": deploy.ready_replicas,
            },
        }
        return StepWrite(
            a.id,
            (StepState.ACCEPTED,),
            {"state": StepState.CONVERGED, "finished_at": now},
            status=status,
            events=({"kind": "action_converged", "detail": {"step": a.step}},),
        )

    def _dependents(self, failed: ActionRow, v: Verdict, now: datetime) -> list[StepWrite]:
        tr = self.store.get_transition(failed.transition_id)
        first = first_order(tr.order if tr is not None else None)
        if failed.order != first:
            return []
        waiting = self.store.list_actions(transition_id=failed.transition_id, states=UNSUBMITTED)
        culprit = _as_failed(failed, v)
        return [_cancellation(x, culprit, v, now) for x in waiting if x.order != first]

    def _phase_of(self, culprit: ActionRow) -> Phase:
        recorded = (culprit.detail or {}).get(PHASE)
        if recorded:
            return Phase(recorded)
        # rows written before PHASE
        status = self.store.get_status(culprit.schedule, culprit.deploy_id)
        if status is not None and is_terminal(status.phase):
            return Phase(status.phase)
        return Phase.PARTIAL_EXECUTION


def _as_failed(a: ActionRow, v: Verdict) -> ActionRow:
    return replace(a, state=StepState.FAILED, reason=v.reason, fix=v.fix)


def _cancellation(x: ActionRow, culprit: ActionRow, v: Verdict, now: datetime) -> StepWrite:
    done = f"{culprit.deploy_id} {culprit.step} failed ({v.reason})"
    fix = f"{done}; {x.deploy_id} not touched — {v.fix}"
    detail: dict[str, Any] = {**(x.detail or {}), PHASE: v.phase.value, "culprit": culprit.id}
    return StepWrite(
        x.id,
        UNSUBMITTED,
        {
            "state": StepState.CANCELLED,
            "reason": v.reason,
            "fix": v.fix,
            "finished_at": now,
            "detail": detail,
        },
        status={"phase": v.phase.value, "reason": v.reason, "fix": fix},
    )
