"""What an orchestrator asks the engine, one call per intent (the Dagster layer's engine face).

The Dagster layer translates: a plan into a run request, an outcome into an op's output, a
status row into an asset event. What to launch, what a step would do now and what an
apply-now request is answered are the engine's decisions, made here over the store's ports,
never assembled by a sensor from store reads:

* ``preview_step`` / ``can_move`` — what a run would do with a step now (no write);
* ``plans_to_launch`` — the open plans with steps still pending, each a launch of its plan
  run or a resume run, given the states of the runs the orchestrator already made;
* ``serve_apply_now`` — every pending apply-now request served and answered;
* ``serve_due``, ``reconcile_waiting``, ``arm`` — a pass over the due work, over one schedule
  (waiting a moment for the lock), or at a pre-armed run's boundary, with the plans a run is
  needed for and what the tick says;
* ``capacity_ready`` — the waiting steps that fit now, by plan;
* ``reservation_ids``, ``ledger``, ``capacity_waiting``, ``statuses`` and the other reads an
  asset or a skip reason shows.
"""

# Decisions embodied here (docs/decisions.md):
# * “A plan run that ran while the gate was off”
# * “A resume run only when a step can move”
# * “The Dagster layer asks the engine by intent”
# * “Dagster finds due work by the index, and its cursor no longer decides what is due”
# * “The Dagster layer translates; the engine decides what a tick launches and says”

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from gps_dagster.domain.evaluator import effective_intent
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.step_state import UNSUBMITTED, Gate, PlanState, StepState
from gps_dagster.domain.timeline_doc import ReadyByTimings, ready_by_rows, skipped_edge
from gps_dagster.engine import operations, ticks
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.gps_checks import (
    CheckOutcome,
    LedgerReader,
    ReservationView,
    ledger_verdict,
    reservation_view,
)
from gps_dagster.engine.gps_checks import reservation_ids as ledger_ids
from gps_dagster.engine.launches import LaunchClaimStore, RunsOf, batch_of, claim_plans
from gps_dagster.engine.reports import PassReport, PlanRef, StepOutcome, StepRef
from gps_dagster.ports import CoreError
from gps_dagster.store.errors import ScheduleNotFound
from gps_dagster.store.records import ApplyNowRequest, ScheduleRecord, TargetStatusRow

if TYPE_CHECKING:
    from gps_dagster.engine.engine import Engine

__all__ = [
    "ON_THE_WAY",
    "ApplyNowRequest",
    "Armed",
    "DueWork",
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


@dataclass(frozen=True, slots=True)
class DueWork:
    """What a pass over the due work did: whether anything was due, the plans a run is needed
    for, and a line per schedule (or why nothing was due)."""

    due: bool
    plans: list[PlanRef]
    lines: list[str]


@dataclass(frozen=True, slots=True)
class Armed:
    """A pre-armed run's plan, opened at its boundary, and its releases submitted then."""

    plan: PlanRef
    sent: list[StepOutcome]


BUSY_PAUSE_S = 0.1
BUSY_WAIT_S = 5.0
"""Several boundary schedules firing at the same minute (or a schedule and a sensor) ask for
passes at once; each holds the engine's lock for a fraction of a second. Answering ``Busy``
at once left the boundary to the next sensor tick (seconds later, measured: p95 11 s with three
schedules at one minute); waiting up to ``BUSY_WAIT_S`` serves it in the same tick."""

Launch = Callable[[ApplyNowRequest, PassReport], Sequence[Sequence[str]]]
"""Launches the plans of an apply-now request's pass: the targets of each run it made."""


class Intents:
    """The engine's answers to an orchestrator, over the engine and the edges' requests."""

    def __init__(
        self, engine: Engine, requests: EdgeRequests, launches: LaunchClaimStore[Any] | None = None
    ) -> None:
        self.engine, self.requests, self.launches = engine, requests, launches

    def claim_launches(
        self, keys: Sequence[tuple[str, str]], *, origin: str, runs_of: RunsOf | None
    ) -> tuple[set[str], list[str]]:
        """Claim each plan run key (``(run key, transition id)``) for ``origin``
        (``launches.claim_plans``): the keys it may request, a line per key it must skip."""
        assert self.launches is not None, "an orchestrator's intents carry its launch claims"
        now = self.engine.clock.now()
        return claim_plans(self.launches, keys, origin=origin, now=now, runs_of=runs_of)

    def launch_batch(self, run_key: str) -> str | None:
        """The batch the origin that claimed this plan run key launched it in, if any."""
        claim = self.launches.get(run_key) if self.launches is not None else None
        return batch_of(claim.origin) if claim is not None else None

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

    def reconcile_waiting(
        self, schedule: str, trigger: str, pause: Callable[[float], object] | None
    ) -> PassReport:
        """A pass over one schedule, retried while another pass holds the lock (up to
        ``BUSY_WAIT_S``, through ``pause``; once without a ``pause``); ``Busy`` after that."""
        attempts = int(BUSY_WAIT_S / BUSY_PAUSE_S) if pause is not None else 1
        for attempt in range(attempts):
            try:
                return self.engine.reconcile(schedule=schedule, trigger=trigger)
            except Busy:
                if attempt == attempts - 1 or pause is None:
                    raise
                pause(BUSY_PAUSE_S)
        raise AssertionError("unreachable")

    def serve_due(self, now: datetime, trigger: str, *, release_first_only: bool) -> DueWork:
        """Serve every schedule the due index says needs a pass at ``now`` (one claimed,
        batched pass; ``Engine.reconcile_due``): the plans a run is needed for and a line per
        schedule. ``release_first_only``: a launcher of one job (the batch job) leaves
        acquire-first plans unclaimed for the reconcile sensor, which launches any open plan no
        run exists for."""
        at = self.engine.next_due(now)
        if at is None or at > now:
            return DueWork(False, [], [ticks.nothing_due(at)])
        report = self.engine.reconcile_due(trigger=trigger)
        plans = ticks.launchable(report.plans, release_first_only=release_first_only)
        return DueWork(True, plans, ticks.served_lines(report, len(plans)))

    def arm(
        self,
        schedule: str,
        boundary: str,
        *,
        trigger: str,
        pause: Callable[[float], object] | None,
        claim: Callable[[PlanRef], str | None],
    ) -> Armed | str:
        """What a pre-armed run does at its boundary, and nothing more: the schedule's pass (the
        plan opened and fenced now), the launch ``claim`` (None when won, else why not), and the
        submit of every release step; or why the run is not needed. The releases skip the
        second alias and preflight read: this pass opened and preflighted them a moment ago."""
        try:
            report = self.reconcile_waiting(schedule, trigger, pause)
        except Busy:
            return "another pass held the lock; the boundary sensor serves the boundary"
        plans = ticks.launchable(report.plans)
        if not plans:
            return f"no new plan at {boundary}: intent unchanged, or already served"
        plan = plans[0]
        if plan.order != ticks.RELEASE_FIRST:
            return f"plan {plan.transition_id} is {plan.order}: the reconcile sensor runs it"
        refused = claim(plan)
        if refused is not None:
            return refused
        ids = [s.step_id for s in plan.release_steps]
        return Armed(plan, list(self.engine.execute_steps(ids, fresh={plan.transition_id})))

    def capacity_ready(self) -> dict[str, list[StepRef]]:
        """The waiting steps that fit now, by plan (sorted by its id); the rest re-previewed and
        timed out when past their deadline (``Engine.capacity_waits``)."""
        by_transition: dict[str, list[StepRef]] = defaultdict(list)
        for step in self.engine.capacity_waits():
            by_transition[self.step_transition(step.step_id)].append(step)
        return dict(sorted(by_transition.items()))

    def changed_statuses(self, seen: dict[str, int]) -> list[TargetStatusRow]:
        """Status rows whose version moved since ``seen`` (``schedule/deploy`` → version,
        updated in place)."""
        out = []
        for row in self.statuses():
            key = f"{row.schedule}/{row.deploy_id}"
            if seen.get(key) != row.status_version:
                seen[key] = row.status_version
                out.append(row)
        return out

    def skipped_edge(self, schedule: str, window: str) -> str | None:
        """A holiday (or listed date) that removed this window edge's occurrence now, if any."""
        record = self.find_schedule(schedule) if window else None
        return skipped_edge(record.spec, window, self.engine.clock.now()) if record else None

    def ready_by_leads(self, schedules: Iterable[Schedule]) -> dict[tuple[str, str], float]:
        """(schedule, window) -> the longest lead of its ready-by starts in the week ahead."""
        now = self.engine.clock.now()
        out: dict[tuple[str, str], float] = {}
        for spec in schedules:
            if not any(spec.is_ready_by(t) for t in spec.target_ids):
                continue
            for row in ready_by_rows(
                spec, now, now + timedelta(days=8), self.ready_by_timings(spec)
            ):
                boundary = datetime.fromisoformat(row["boundary"])
                window = effective_intent(spec, row["acquiring"][0], boundary).source
                key = (spec.name, window)
                out[key] = max(out.get(key, 0.0), float(row["lead_s"]))
        return out

    def ledger(self) -> LedgerReader:
        """The reservation ledger (the GPS asset checks read it)."""
        return self.engine.store.ledger()

    def reservation_ids(self) -> list[str]:
        """Ids of the reservations still holding GPUs (none until GPS reservations are created)."""
        return ledger_ids(self.ledger())

    def ledger_verdict(self, which: str) -> CheckOutcome:
        """One GPS check (``gps_checks.PLACEMENT`` or ``OVERCOMMIT``) over the whole ledger."""
        return ledger_verdict(self.ledger(), self.engine.core, which)

    def reservation_changes(
        self, reservation_ids: Sequence[str], seen: dict[str, str]
    ) -> list[ReservationView]:
        """The views of these reservations whose members or verdicts changed since ``seen``
        (reservation id → digest, updated in place)."""
        out = []
        for rid in reservation_ids:
            view = reservation_view(self.ledger(), self.engine.core, rid)
            if seen.get(rid) != view.digest:
                seen[rid] = view.digest
                out.append(view)
        return out

    def reservation_members(self, deploy_ids: Sequence[str]) -> set[str]:
        """The deploys bound to a GPU reservation, as the core reports them now (none when the
        core cannot answer: the asset graph loses its edges, the code location still loads)."""
        if not deploy_ids:
            return set()
        try:
            views = self.engine.core.get_deploys(list(deploy_ids))
        except CoreError:
            return set()
        return {d for d, v in views.items() if v.reservation is not None}

    def capacity_waiting(self) -> list[str]:
        """The deploy of every step waiting for capacity (one entry per step)."""
        return [
            a.deploy_id for a in self.engine.store.list_actions(states=(StepState.CAPACITY_WAIT,))
        ]

    def capacity_skip(self) -> str:
        """Why the capacity-wait sensor launches nothing."""
        return ticks.capacity_skip(self.capacity_waiting())

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
