"""The reconcile pass (R-PASS): one function, time and the core injected.

``run_pass`` is the standalone engine: gate → lock → cursor page → per
schedule: observe accepted steps, examine targets, open plans, execute steps
inline. ``reconcile`` is the same without executing steps — the Dagster layer
launches a transition run for each plan it returns, and its ops call
``execute_step``. Correctness never depends on the lock (R-PASS-2): three
engines may run this at once; fence, CAS and idempotency keys keep them
from doing anything twice.
"""

# Decisions embodied here (docs/decisions.md):
# * “The gate is off until someone turns it on”
# * “Replicas share due work by claims, not by the pass lock”
# * “The sweep skips a schedule whose version moved under it”
# * “Apply-now locks its schedule, probes the sweep”
# * “A boundary's releases go before its acquires, across due batches”

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime

from gps_dagster.domain import step_state
from gps_dagster.domain.step_state import UNSUBMITTED, Gate, PlanState, StepState
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.controls import gate_moved, read_cursor, read_gate, write_cursor
from gps_dagster.engine.convergence import AfterConverged, Observer, Witness
from gps_dagster.engine.due import next_due
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.heartbeat import ClaimHeartbeat
from gps_dagster.engine.plan_inputs import Prefetch, ScheduleOutcome
from gps_dagster.engine.planning import Planner
from gps_dagster.engine.preflight import ReservationCheck
from gps_dagster.engine.ready_by import ReadyBy
from gps_dagster.engine.reports import PassReport, SecondHalves, StepOutcome
from gps_dagster.engine.step_calls import core_session
from gps_dagster.engine.steps import StepRunner
from gps_dagster.engine.store_ports import EngineStore
from gps_dagster.engine.surface import DagsterSurface, plan_ref
from gps_dagster.ports import Clock, Core
from gps_dagster.store.due import DueClaim, NextDue
from gps_dagster.store.errors import StoreUnavailable
from gps_dagster.store.records import ActionRow, ScheduleRecord
from gps_dagster.store.shapes import Draft

log = logging.getLogger(__name__)

LOCK_NAME = "deploy-schedule-pass"


def one_lock_name(schedule: str) -> str:
    """The lock of one schedule's pass (fits the lease key's 64 characters)."""
    return "pass-of:" + hashlib.sha256(schedule.encode()).hexdigest()[:32]


IN_FLIGHT = step_state.IN_FLIGHT


class Engine(DagsterSurface):
    """The deploy-schedule engine over a store and a core."""

    def __init__(
        self,
        store: EngineStore,
        core: Core,
        clock: Clock,
        config: EngineConfig | None = None,
        *,
        reservation_check: ReservationCheck | None = None,
        witness: Witness | None = None,
        after_converged: AfterConverged | None = None,
        database_clock: Clock | None = None,
    ) -> None:
        """``database_clock``: replicas' clocks are measured against it (default: the
        database's)."""
        self.store, self.core, self.clock = store, core, clock
        self.config = config or EngineConfig()
        self.planner = Planner(
            store,
            core,
            reservation_check,
            max_clock_skew_s=self.config.max_clock_skew_s,
            crash_loop_restarts=self.config.crash_loop_restarts,
            holder=self.config.holder,
            reference=database_clock.now if database_clock is not None else None,
            ready_by=ReadyBy(
                self.config.ready_by_default_start_s,
                self.config.ready_by_default_stop_s,
                self.config.ready_by_cap_s,
                self.config.ready_by_history,
            ),
        )
        self.runner = StepRunner(store, core, clock, self.config, reservation_check)
        self.observer = Observer(
            store, core, clock, self.config, self.runner, witness, after_converged
        )
        self._heartbeat: ClaimHeartbeat | None = None

    # -- passes ------------------------------------------------------------------

    def run_pass(
        self,
        *,
        schedule: str | None = None,
        trigger: str = "tick",
        stop: Callable[[], bool] | None = None,
    ) -> PassReport:
        """A full pass that also executes steps inline (``engine run``, ``simulate``).

        ``stop``: asked between schedules; True ends the pass early (``PassReport.stopped``).
        """
        return self._pass(schedule=schedule, trigger=trigger, execute=True, stop=stop)

    def reconcile(self, *, schedule: str | None = None, trigger: str = "sensor") -> PassReport:
        """A pass that opens plans but leaves their steps to the caller (Dagster runs)."""
        return self._pass(schedule=schedule, trigger=trigger, execute=False)

    def reconcile_due(self, *, trigger: str = "boundary") -> PassReport:
        """Serve only the schedules due now (claimed, in batches), opening plans without running
        their steps: the boundary sensor's one call per tick (no sweep page, no pass lock)."""
        now = self.clock.now()
        report = PassReport(
            at=now, trigger=trigger, gate=read_gate(self.store, self.clock, self.config.holder)
        )
        with self.heartbeat():
            self._serve_due(report, now=now, trigger=trigger, execute=False, stop=None)
        return report

    def heartbeat(self) -> ClaimHeartbeat:
        """Renews this replica's due claims while a pass serves them (``engine/heartbeat.py``):
        one for every pass of this engine."""
        if self._heartbeat is None:
            self._heartbeat = ClaimHeartbeat(
                self.store, self.clock, holder=self.config.holder, lease_s=self.config.claim_ttl_s
            )
        return self._heartbeat

    def _pass(
        self,
        *,
        schedule: str | None,
        trigger: str,
        execute: bool,
        stop: Callable[[], bool] | None = None,
    ) -> PassReport:
        now = self.clock.now()
        report = PassReport(
            at=now, trigger=trigger, gate=read_gate(self.store, self.clock, self.config.holder)
        )
        if schedule is not None:
            return self._one(schedule, report, trigger=trigger, execute=execute)
        with self.heartbeat():
            return self._full_pass(report, now=now, trigger=trigger, execute=execute, stop=stop)

    def _full_pass(
        self,
        report: PassReport,
        *,
        now: datetime,
        trigger: str,
        execute: bool,
        stop: Callable[[], bool] | None,
    ) -> PassReport:
        # Due work first, found by index and shared between replicas by claims: a boundary
        # is served whatever page the cursor is on. Then the steady sweep of one page.
        served = self._serve_due(report, now=now, trigger=trigger, execute=execute, stop=stop)
        if report.stopped:
            return report
        self._observe_claimed_elsewhere(report, served)
        with self.store.lock(
            LOCK_NAME, holder=self.config.holder, now=now, ttl_s=self.config.lock_ttl_s
        ) as lock:
            if not lock.acquired:
                report.busy = True
                return report
            page = self._records(None, report)
            # The sweep claims nothing (no write per page): it skips what another replica has
            # claimed now and what this pass already served; a claim taken while it visits
            # means at worst a second visit, which the fence, CAS and keys make harmless.
            rows = self.store.due_rows([r.name for r in page])
            if gate_moved(self.store, report.gate):  # since the pass read it: every schedule
                return report  # is due now under the new gate; a stale visit would lose that
            now_ = self.clock.now()
            # A version applied between the page read and the due rows' read is skipped: its
            # record here is stale, and its due row already says "due now" with a revision this
            # visit would carry (and overwrite with the stale version's next due: decision "The
            # sweep skips a schedule whose version moved under it").
            # The due path serves it, on this replica's next wake-up or another's.
            records = [
                r
                for r in page
                if r.name not in served
                and r.name in rows
                and rows[r.name].version == r.version
                and not _claimed_elsewhere(rows[r.name], self.config.holder, now_)
            ]
            claims = [rows[r.name] for r in records]
            self._serve(
                records, claims, report, trigger=trigger, execute=execute, stop=stop, page=True
            )
        return report

    def _observe_claimed_elsewhere(self, report: PassReport, served: set[str]) -> None:
        """Observe the accepted steps of schedules another replica claims (R-NEXT-4).

        A claim saves planning work twice; it must not freeze the observation of steps the core
        already accepted (a busy or dead holder): that is a read and a CAS write any replica may
        do, and the step's convergence clock keeps running meanwhile.
        """
        names = self.store.claimed_elsewhere_in_flight(
            holder=self.config.holder, now=self.clock.now(), limit=self.config.due_batch
        )
        names = [n for n in names if n not in served]
        if not names:
            return
        accepted = self.store.list_actions(schedules=names, states=(StepState.ACCEPTED,))
        try:
            reads = dict(self.core.get_deploys(sorted({a.deploy_id for a in accepted})))
        except Exception as exc:  # each step is then read on its own by the observer
            log.warning("pass: batched deploy read failed (%s); observing one by one", exc)
            reads = {}
        report.steps += self.observer.observe_many(accepted, reads)

    def _one(self, name: str, report: PassReport, *, trigger: str, execute: bool) -> PassReport:
        """A pass for one schedule (apply-now, a sensor): 409 when busy.

        The lock is the schedule's own (R-API: one schedule's pass no longer makes
        another's apply-now busy); a sweep holding the pass lock still answers busy
        (R-PASS-2), probed, not held, so two one-schedule passes never exclude each other.
        Targets belong to one schedule (R-MODEL-6): the schedule's lock is its targets'.
        """
        with self.store.lock(
            one_lock_name(name),
            holder=self.config.holder,
            now=report.at,
            ttl_s=self.config.lock_ttl_s,
        ) as lock:
            if not lock.acquired or not self._sweep_idle(report.at):
                raise Busy(name)
            record = self.store.get_schedule(name)
            claims = list(self.store.due_rows([name]).values())
            self._serve(
                [record],
                claims,
                report,
                trigger=trigger,
                execute=execute,
                force=trigger == "apply_now",
            )
        return report

    def _sweep_idle(self, now: datetime) -> bool:
        """Whether no sweep holds the pass lock now (taken and let go at once: a probe)."""
        with self.store.lock(
            LOCK_NAME, holder=self.config.holder, now=now, ttl_s=self.config.lock_ttl_s
        ) as sweep:
            return sweep.acquired

    def _serve_due(
        self,
        report: PassReport,
        *,
        now: datetime,
        trigger: str,
        execute: bool,
        stop: Callable[[], bool] | None,
    ) -> set[str]:
        """Claim and serve the schedules due at ``now``, a batch at a time, until none is left.

        Returns the schedules served; ``stop`` is asked between schedules (``report.stopped``).
        Every batch's first halves (a swap's releases) are submitted before any second half is
        previewed: at a boundary of many batches, the last batch's releases wait for no
        batch's capacity previews.
        """
        served: set[str] = set()
        later = SecondHalves()
        while not report.stopped:
            claims = self.store.claim_due(
                holder=self.config.holder,
                now=now,
                limit=self.config.due_batch,
                lease_s=self.config.claim_ttl_s,
            )
            again = [c for c in claims if c.name in served]  # due again within this pass: next one
            self.store.finish_due(
                [NextDue(c.name, -1, None) for c in again], holder=self.config.holder
            )
            claims = [c for c in claims if c.name not in served]
            if not claims:
                break
            served.update(c.name for c in claims)
            records = self.store.schedules_named([c.name for c in claims])
            self._serve(
                records, claims, report, trigger=trigger, execute=execute, stop=stop, later=later
            )
        if later.names and not report.stopped:
            names = sorted(later.names)
            moved = self.runner.run(names, later.fresh, later.reads, skip=later.done)
            report.steps += moved
            if moved:
                report.steps += self.observer.observe_open(names)
        return served

    def _serve(
        self,
        records: list[ScheduleRecord],
        claims: list[DueClaim],
        report: PassReport,
        *,
        trigger: str,
        execute: bool,
        stop: Callable[[], bool] | None = None,
        force: bool = False,
        page: bool = False,
        later: SecondHalves | None = None,
    ) -> None:
        """Visit ``records`` as one batch; write each one's next due and drop the claims.

        Reads are shared (one prefetch, one core session for the plans' preflights), plans
        with nothing to supersede open together, and their steps move together
        (``engine/steps.py``). With ``later``, only the plans' first halves move now; the
        rest is the caller's, with what ``later`` collects.
        """
        visited: list[tuple[ScheduleRecord, datetime, bool]] = []
        try:
            self.planner.measure(self.clock)  # the offset its interval writes carry (R-PASS-14)
            prefetch = self._prefetch(records)
            self._in_flight(prefetch, report)
            drafts: list[tuple[Draft, ScheduleOutcome, bool]] = []
            self.planner.drafts = drafts
            try:
                with core_session(self.core):
                    self._visit_all(
                        records,
                        report,
                        prefetch,
                        visited,
                        trigger=trigger,
                        force=force,
                        stop=stop,
                        page=page,
                    )
            finally:
                self.planner.drafts = None
            fresh = self._open_drafts(drafts, report)
            if execute and report.gate == Gate.ENFORCE and visited:
                names = [r.name for r, _, _ in visited]
                first_only = later is not None
                moved = self.runner.run(names, fresh, prefetch.reads, first_only=first_only)
                if later is not None:
                    later.add(names, fresh, prefetch.reads, moved)
                report.steps += moved
                if moved:  # what was just submitted may be done already (a core with no delay)
                    report.steps += self.observer.observe_open(names)
        finally:
            self._finish_due(visited, claims, report)

    def _visit_all(
        self,
        records: list[ScheduleRecord],
        report: PassReport,
        prefetch: Prefetch,
        visited: list[tuple[ScheduleRecord, datetime, bool]],
        *,
        trigger: str,
        force: bool,
        stop: Callable[[], bool] | None,
        page: bool,
    ) -> None:
        for index, record in enumerate(records):
            if stop is not None and stop():
                if page:
                    self._stop_at(records, index, report)
                report.stopped = True
                return
            at = self.clock.now()
            ok = True
            try:
                self._visit(record, report, prefetch, trigger=trigger, force=force)
            except StoreUnavailable:  # the database is down: the pass ends, the loop owns it
                raise
            except Exception as exc:  # one schedule's failure never stops the others
                self._schedule_failed(record.name, exc, report)
                ok = False
            visited.append((record, at, ok))

    def _in_flight(self, prefetch: Prefetch, report: PassReport) -> None:
        """Observe the batch's accepted steps, resubmit its unconfirmed ones, re-read statuses."""
        flying = [a for steps in prefetch.in_flight.values() for a in steps]
        if not flying:
            return
        report.steps += self.observer.observe_many(
            [a for a in flying if a.state == StepState.ACCEPTED], prefetch.reads
        )
        if report.gate == Gate.ENFORCE:
            report.steps += [
                self.runner.execute(a.id) for a in flying if a.state == StepState.SUBMITTING
            ]
        names = sorted(prefetch.in_flight)
        prefetch.statuses.update(self.store.statuses_for(names))
        prefetch.refreshed.update(names)

    def _open_drafts(
        self, drafts: list[tuple[Draft, ScheduleOutcome, bool]], report: PassReport
    ) -> set[str]:
        """Open the collected plans in one transaction; the ids of those opened."""
        if not drafts:
            return set()
        opened = self.store.open_many([d for d, _, _ in drafts], now=self.clock.now())
        for draft, outcome, refused in drafts:
            tid = draft.transition.id
            if tid not in opened:
                continue
            (outcome.refused if refused else outcome.opened).append(tid)
            self.planner.record_lead(outcome, self.clock.now())
            if not refused:
                report.plans.append(plan_ref(draft.transition, draft.steps))
        return opened

    def _finish_due(
        self,
        visited: list[tuple[ScheduleRecord, datetime, bool]],
        claims: list[DueClaim],
        report: PassReport,
    ) -> None:
        by_name = {c.name: c for c in claims}
        seen = {r.name for r, _, _ in visited}
        outcomes = {o.schedule: o for o in report.schedules}
        flying = self.store.schedules_in_flight(sorted(seen)) if seen else set()
        out = [NextDue(c.name, -1, None) for c in claims if c.name not in seen]  # claim dropped
        for record, at, ok in visited:
            claim = by_name.get(record.name)
            if claim is None:
                continue
            failed = not ok or bool(getattr(outcomes.get(record.name), "errors", None))
            due = next_due(
                record,
                claim,
                at,
                report.gate,
                self.config,
                failed=failed,
                in_flight=record.name in flying,
                early=self.planner.ready_by.next_early(self.store, record.spec, at),
            )
            if due == claim.due_at and claim.claimed_by != self.config.holder:
                continue  # a sweep visit that changed nothing: nothing to write
            out.append(NextDue(record.name, claim.revision, due))
        self.store.finish_due(out, holder=self.config.holder)

    def _stop_at(self, records: list[ScheduleRecord], index: int, report: PassReport) -> None:
        """Ended early in the sweep: the next pass starts with the first schedule not visited."""
        if index > 0 and len(records) > 1:
            report.cursor = records[index - 1].name
            write_cursor(self.store, report.cursor, self.clock)

    def _schedule_failed(self, name: str, exc: Exception, report: PassReport) -> None:
        log.error("pass: schedule %s failed; the pass goes on with the others", name, exc_info=exc)
        report.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        try:
            self.store.add_event(
                self.clock.now(),
                name,
                None,
                "schedule_error",
                reason=str(getattr(exc, "reason", "") or type(exc).__name__),
                detail={"error": f"{type(exc).__name__}: {exc}", "holder": self.config.holder},
            )
        except Exception:
            log.warning("could not record the schedule_error event of %s", name, exc_info=True)

    def _prefetch(self, records: list[ScheduleRecord]) -> Prefetch:
        names = [r.name for r in records]
        try:
            reads = dict(self.core.get_deploys([t for r in records for t in r.spec.target_ids]))
        except Exception as exc:  # each target is then read on its own, and errors land per target
            log.warning("pass: batched deploy read failed (%s); reading targets one by one", exc)
            reads = {}
        in_flight: dict[str, list[ActionRow]] = {}
        for a in self.store.list_actions(schedules=names, states=IN_FLIGHT):
            in_flight.setdefault(a.schedule, []).append(a)
        statuses = self.store.statuses_for(names)
        missing = [
            (r.name, t, r.version)
            for r in records
            for t in r.spec.target_ids
            if (r.name, t) not in statuses
        ]
        if missing:  # first sight of these targets: create their rows in one statement
            self.store.ensure_statuses(missing, now=self.clock.now())
            statuses = self.store.statuses_for(names)
        pinnable = [v.id for v in reads.values() if v.instance is not None]
        pins = self.store.pins_for(pinnable) if pinnable else None  # R-K8S-8, one read per batch
        return Prefetch(statuses, reads, in_flight, pins=pins)

    def _records(self, schedule: str | None, report: PassReport) -> list[ScheduleRecord]:
        if schedule is not None:
            return [self.store.get_schedule(schedule)]
        cursor = read_cursor(self.store)
        page = self.store.page_schedules(cursor, self.config.page_size)
        if len(page) < self.config.page_size:
            page += self.store.page_schedules(None, self.config.page_size - len(page))
            page = list({r.name: r for r in page}.values())
            report.cursor = None
        else:
            report.cursor = page[-1].name
        if report.cursor != cursor:
            write_cursor(self.store, report.cursor, self.clock)
        return page

    def _visit(
        self,
        record: ScheduleRecord,
        report: PassReport,
        prefetch: Prefetch,
        *,
        trigger: str,
        force: bool,
    ) -> None:
        drafted = len(self.planner.drafts or ())
        outcome = self.planner.visit(
            record,
            now=self.clock.now(),
            gate=report.gate,
            trigger=trigger,
            force=force,
            prefetch=prefetch,
        )
        report.schedules.append(outcome)
        if len(self.planner.drafts or ()) == drafted:  # opened on its own (not a draft)
            report.plans += [self.pending_steps(tid) for tid in outcome.opened]

    def advance(self, schedule: str) -> list[StepOutcome]:
        """Execute every step of the schedule's open plans that can move now, in plan order."""
        out: list[StepOutcome] = []
        for tr in self.store.list_transitions(schedule, states=(PlanState.OPEN,)):
            actions = self.store.list_actions(transition_id=tr.id, states=UNSUBMITTED)
            for a in sorted(actions, key=lambda x: x.seq):
                out.append(self.runner.execute(a.id))
            out += [
                self.observer.observe_action(a)
                for a in self.store.list_actions(transition_id=tr.id, states=(StepState.ACCEPTED,))
            ]
        return out


def _claimed_elsewhere(row: DueClaim, holder: str, now: datetime) -> bool:
    return (
        row.claimed_by not in (None, holder)
        and row.claimed_until is not None
        and row.claimed_until > now
    )
