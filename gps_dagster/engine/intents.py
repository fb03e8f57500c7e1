"""What an orchestrator asks the engine, one call per intent (the Dagster layer's engine face).

The Dagster layer translates: a plan into a run request, an outcome into an op's output, a
status row into an asset event. What to launch, what a step would do now and what an
apply-now request is answered are the engine's decisions, made here over the store's ports,
never assembled by a sensor from store reads:

* ``preview_step`` / ``can_move`` — what a run would do with a step now (no write);
* ``plans_to_launch`` — the open plans with steps still pending, each a launch of its plan
  run or a resume run, given the states of the runs the orchestrator already made;
* ``serve_apply_now`` — every pending apply-now request served and answered;
* ``reservation_ids``, ``ledger``, ``capacity_waiting``, ``statuses`` and the other reads an
  asset or a skip reason shows.
"""

# Decisions embodied here (docs/decisions.md):
# * “A plan run that ran while the gate was off”
# * “A resume run only when a step can move”
# * “The Dagster layer asks the engine by intent”

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.step_state import UNSUBMITTED, Gate, PlanState, StepState
from gps_dagster.domain.timeline_doc import ReadyByTimings
from gps_dagster.engine import operations
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.gps_checks import LedgerReader
from gps_dagster.engine.gps_checks import reservation_ids as ledger_ids
from gps_dagster.engine.reports import PassReport, PlanRef, StepOutcome
from gps_dagster.store.errors import ScheduleNotFound
from gps_dagster.store.records import ApplyNowRequest, ScheduleRecord, TargetStatusRow

if TYPE_CHECKING:
    from gps_dagster.engine.engine import Engine

__all__ = [
    "ON_THE_WAY",
    "ApplyNowRequest",
    "EdgeRequests",
    "Intents",
    "PlanLaunch",
    "RunsSeen",
    "TargetStatusRow",
]

PREVIEWED = frozenset(UNSUBMITTED)
"""The step states a preview can still move; a step past them is reported as it stands."""
ON_THE_WAY = frozenset(
    {Phase.PENDING, Phase.RELEASING, Phase.CAPACITY_WAIT, Phase.ACQUIRING, Phase.AWAITING_READY}
)
"""Target phases of a plan still on its way (an apply-now answer does not say "at its intent")."""


@dataclass(frozen=True, slots=True)
class RunsSeen:
    """What the orchestrator knows of a plan's runs: how many it made, any still in flight."""

    runs: int
    in_flight: bool


@dataclass(frozen=True, slots=True)
class PlanLaunch:
    """A plan to launch: its plan run (``resume`` False), else a resume run of it."""

    plan: PlanRef
    resume: bool


class EdgeRequests(Protocol):
    """What the edges queue for the engine beside its own store ports: apply-now requests, and
    a schedule looked up by name (None when absent)."""

    def pending_apply_now(self) -> list[ApplyNowRequest]: ...
    def finish_apply_now(
        self, request_id: int, *, result: str, now: datetime, state: str = ...
    ) -> bool: ...
    def find_schedule(self, name: str) -> ScheduleRecord | None: ...


Launch = Callable[[ApplyNowRequest, PassReport], Sequence[Sequence[str]]]
"""Launches the plans of an apply-now request's pass: the targets of each run it made."""


class Intents:
    """The engine's answers to an orchestrator, over the engine and the edges' requests."""

    def __init__(self, engine: Engine, requests: EdgeRequests) -> None:
        self.engine, self.requests = engine, requests

    def preview_step(self, step_id: str) -> StepOutcome:
        """What a run would do with this step now, nothing written: the engine's own preview of a
        pending or waiting step; a step past them (or unknown) as it stands."""
        action = self.engine.store.get_action(step_id)
        if action is None:
            return StepOutcome(step_id, "", "unknown")
        if action.state not in PREVIEWED:
            return StepOutcome(step_id, action.deploy_id, action.state)
        return self.engine.preview_step(step_id)

    def can_move(self, step_ids: Sequence[str]) -> bool:
        """Whether a run would advance any of these steps now (the engine's own preview)."""
        return any(self.engine.preview_step(s).state == "ready" for s in step_ids)

    def plans_to_launch(
        self, runs_of: Callable[[str], RunsSeen], *, skip: Collection[str] = ()
    ) -> list[PlanLaunch]:
        """The open plans (not in ``skip``) with steps still ``pending``, each with what to launch.

        No run yet (a tick's request lost in a daemon crash) or the gate not enforcing: the plan
        run, under its own run key (the orchestrator drops it once that run exists). Gate
        enforcing and the plan's runs finished with steps left pending: a resume run, at most one
        in flight per plan, and only when a pending step can move now."""
        gate = self.engine.store.get_gate()
        out: list[PlanLaunch] = []
        for tr in self.engine.store.list_transitions(states=(PlanState.OPEN,)):
            if tr.id in skip:
                continue
            pending = self.engine.store.list_actions(
                transition_id=tr.id, states=(StepState.PENDING,)
            )
            if not pending:
                continue
            seen = runs_of(tr.id)
            if not seen.runs or gate != Gate.ENFORCE:
                out.append(PlanLaunch(self.engine.pending_steps(tr.id), resume=False))
            elif not seen.in_flight and self.can_move([a.id for a in pending]):
                out.append(PlanLaunch(self.engine.pending_steps(tr.id), resume=True))
        return out

    def serve_apply_now(self, launch: Launch) -> list[str]:
        """Serve every pending apply-now request: a pass of its schedule, its plans launched by
        ``launch``, and an answer stored (``apply-now --queue --wait`` prints it); busy answers
        409, a schedule deleted since the request 404 — neither blocks the others. A line per
        request, as answered."""
        log: list[str] = []
        for req in self.requests.pending_apply_now():
            head = f"apply-now #{req.id} {req.schedule}"
            try:
                report = self.engine.reconcile(schedule=req.schedule, trigger="apply_now")
            except Busy as exc:
                answer, state = f"{exc.http_status} busy", "busy"
            except ScheduleNotFound as exc:
                answer, state = f"{exc.http_status} {exc.reason}", "failed"
            else:
                now = self.engine.clock.now()
                answer, state = (
                    self._answer(req.schedule, launch(req, report), report),
                    "done",
                )
                self.requests.finish_apply_now(req.id, result=answer, now=now)
                log.append(f"{head}: {answer}")
                continue
            self.requests.finish_apply_now(
                req.id, result=answer, now=self.engine.clock.now(), state=state
            )
            log.append(f"{head}: {answer}")
        return log

    def _answer(self, schedule: str, runs: Sequence[Sequence[str]], report: PassReport) -> str:
        if runs:
            targets = ", ".join(sorted({t for run in runs for t in run if t}))
            return f"200 ok: {len(runs)} run(s) for {targets}"
        rows = self.engine.store.list_status(schedule)
        phases = ", ".join(f"{r.deploy_id} {r.phase}" for r in rows)
        refused = sum(len(s.refused) for s in report.schedules)
        why = f"{refused} target(s) refused by preflight; " if refused else ""
        moving = [f"{r.deploy_id} {r.phase}" for r in rows if r.phase in ON_THE_WAY]
        if moving:  # not "at its intent": its plan is still running (or waits for capacity)
            return (
                f"200 ok: no new run needed — {why}the current plan is still on its way: "
                f"{', '.join(moving)} ({phases})"
            )
        return f"200 ok: no run needed — {why}every target already at its intent ({phases})"

    def ledger(self) -> LedgerReader:
        """The reservation ledger (the GPS asset checks read it)."""
        return self.engine.store.ledger()

    def reservation_ids(self) -> list[str]:
        """Ids of the reservations still holding GPUs (none until GPS reservations are created)."""
        return ledger_ids(self.ledger())

    def capacity_waiting(self) -> list[str]:
        """The deploy of every step waiting for capacity (one entry per step)."""
        return [
            a.deploy_id for a in self.engine.store.list_actions(states=(StepState.CAPACITY_WAIT,))
        ]

    def step_transition(self, step_id: str) -> str:
        """The plan a step belongs to ("" when the step is unknown)."""
        action = self.engine.store.get_action(step_id)
        return action.transition_id if action is not None else ""

    def step_deadline(self, step_id: str) -> datetime | None:
        """When a step waiting for capacity gives up (``capacity_unavailable``)."""
        action = self.engine.store.get_action(step_id)
        return action.deadline_at if action is not None else None

    def statuses(self, schedule: str | None = None) -> list[TargetStatusRow]:
        """The targets' status rows (of one schedule, or all)."""
        return self.engine.store.list_status(schedule)

    def status(self, schedule: str, deploy_id: str) -> TargetStatusRow | None:
        return self.engine.store.get_status(schedule, deploy_id)

    def schedules(self) -> list[ScheduleRecord]:
        return self.engine.store.list_schedules()

    def apply(self, spec: Schedule, *, now: datetime, actor: str, source: str) -> ScheduleRecord:
        """Check the targets, then create or update ``spec`` (``operations.apply``)."""
        return operations.apply(
            self.engine.store, self.engine.core, spec, now=now, actor=actor, source=source
        )

    def find_schedule(self, name: str) -> ScheduleRecord | None:
        return self.requests.find_schedule(name)

    def ready_by_timings(self, spec: Schedule) -> ReadyByTimings:
        """The learned start/stop figures of a ready-by schedule, as the timeline shows them."""
        return self.engine.planner.ready_by.for_timeline(self.engine.store, spec)
