"""One schedule in one pass: read, check eligibility, evaluate, open transitions.

For each target the pass reads the deploy, re-checks eligibility, and finds
the intent interval in force. A target whose interval identity (schedule
version + interval start) is the one already processed opens nothing; if it
had converged and the deploy no longer matches, that is ``drift_detected`` and
is *not* reverted (SPEC R-PASS-5, U1); if it had converged running and its server now
crash-loops past ``EngineConfig.crash_loop_restarts``, that is terminal ``crash_loop``. Targets with
a new interval — missed ones included — join one transition plan, which is preflighted as a whole
before anything is executed (R-PASS-6).

Time only moves forward (R-PASS-14): a pass whose clock is behind the
interval already stored for a target (another replica's clock is ahead, or
this read is stale) plans nothing for it — "different interval" is not "new
interval". Skew up to ``EngineConfig.max_clock_skew_s`` is expected between
replicas and stays silent; beyond it a ``clock_skew`` event names the replica whose clock is
off against the database's (``engine/skew.py``: the writer of the stored interval, or this one).
The status CAS enforces the same rule in the store.
"""

# Decisions embodied here (docs/decisions.md):
# * “A schedule edit is an intent change”
# * “A refused preflight refuses the whole plan”
# * “Boundary lag”
# * “An ineligible target that should acquire refuses the plan”
# * “Only eligibility's own `ineligible` is re-examined every pass”
# * “Clock skew: behind plans nothing, silently up to 5 s”
# * “The unschedulable grace is the schedule's”
# * “`clock_skew` names the clock that is off against the database's”
# * “A server that crash-loops after it was ready ends `crash_loop`”

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.evaluator import SENTINEL_START, IntentInterval, current_interval
from gps_dagster.domain.phases import Phase, fix_for, is_terminal
from gps_dagster.domain.planner import matches, ordered, steps_for
from gps_dagster.domain.spec import DesiredState, Mode, Schedule, TransitionOrder
from gps_dagster.domain.step_plan import StepPlan
from gps_dagster.domain.step_state import Gate, PlanState
from gps_dagster.engine import keys, skew
from gps_dagster.engine.eligibility import ELIGIBILITY, ineligible_reason, replaced_verdict
from gps_dagster.engine.endpoints import partially_running, read_target
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.engine.plan_inputs import (
    Candidate,
    Prefetch,
    ScheduleOutcome,
    intent_doc,
    observed,
    wanted,
)
from gps_dagster.engine.preflight import ReservationCheck, preflight
from gps_dagster.engine.ready_by import ReadyBy
from gps_dagster.engine.store_ports import PlannerStore
from gps_dagster.ports import Clock, DeployState, DeployView, NotFound, PreviewingReads, Transient
from gps_dagster.store.records import ScheduleRecord, TargetStatusRow
from gps_dagster.store.shapes import Draft, NewPlan, NewStep, StatusMove


class Planner:
    """Opens transition plans for one schedule snapshot."""

    def __init__(
        self,
        store: PlannerStore,
        core: PreviewingReads,
        reservation_check: ReservationCheck | None = None,
        *,
        max_clock_skew_s: float = 5.0,
        crash_loop_restarts: int = 3,
        holder: str = "",
        ready_by: ReadyBy | None = None,
        reference: Callable[[], datetime] | None = None,
    ) -> None:
        self.store, self.core, self.reservation_check = store, core, reservation_check
        self.max_clock_skew_s, self.holder = max_clock_skew_s, holder
        self.crash_loop_restarts = crash_loop_restarts
        self.reference = reference or store.database_now
        """The clock every replica is measured against (the database's; a test's true time)."""
        self.offset_s: float | None = None
        """This replica's clock minus ``reference``, measured per batch (``measure``)."""
        self.ready_by = ready_by or ReadyBy()
        self.drafts: list[tuple[Draft, ScheduleOutcome, bool]] | None = None
        """When set (a batch), plans with nothing to supersede are collected here and opened
        together by the caller (``Store.open_many``) instead of one transaction each."""

    def measure(self, clock: Clock) -> None:
        """Measure this replica's clock offset for the intervals the next visits write."""
        self.offset_s = skew.measure(clock, self.reference)

    def visit(
        self,
        record: ScheduleRecord,
        *,
        now: datetime,
        gate: str,
        trigger: str,
        force: bool = False,
        prefetch: Prefetch | None = None,
    ) -> ScheduleOutcome:
        spec, version = record.spec, record.version
        out = ScheduleOutcome(spec.name, version)
        if not record.enabled or gate == Gate.OFF:
            return out
        early, lead = self.ready_by.early(self.store, spec, now)
        candidates: list[Candidate] = []
        for target in spec.target_ids:
            cand = self._examine(
                spec,
                version,
                target,
                now=now,
                force=force,
                out=out,
                prefetch=prefetch,
                plan_at=early.get(target, now),
            )
            if cand is not None:
                candidates.append(cand)
        if lead is not None and any(c.interval.start == lead.boundary for c in candidates):
            out.lead = lead
        if not candidates or out.errors:
            # A target that could not be read is left out of nothing: a plan without it
            # could acquire before its release and skip its preflight (R-PASS-6). Next pass.
            return out
        if spec.mode is Mode.OBSERVE or gate == Gate.OBSERVE:
            self._observe_only(spec, version, candidates, now, out)
            return out
        # nothing in flight to supersede
        quiet = prefetch is not None and not prefetch.dirty(spec.name)
        blocked = {t: verdict(Phase.INELIGIBLE, r) for t, r in out.blocking.items()}
        self._open(
            spec,
            version,
            candidates,
            now=now,
            trigger=trigger,
            out=out,
            since=record.updated_at,
            quiet=quiet,
            blocked=blocked,
        )
        return out

    # -- per target -----------------------------------------------------------

    def _examine(
        self,
        spec: Schedule,
        version: int,
        target: str,
        *,
        now: datetime,
        force: bool,
        out: ScheduleOutcome,
        prefetch: Prefetch | None,
        plan_at: datetime,
    ) -> Candidate | None:
        status = prefetch.status(spec.name, target) if prefetch is not None else None
        if status is None:
            status = self.store.ensure_status(spec.name, target, schedule_version=version, now=now)
        # plan_at: the boundary itself for a target inside a ready-by lead (R-NEXT-1), else now
        interval = current_interval(spec, target, plan_at)
        if self._behind(status, version, interval, plan_at, out):
            return None
        members: tuple[DeployView, ...] | None = None
        try:
            deploy: DeployView | None
            if prefetch is not None and target in prefetch.reads:
                deploy = prefetch.reads[target]
            else:
                deploy, members = read_target(self.core, target)
        except NotFound:
            deploy = None
        # unreadable: this target plans nothing this pass, the others go on
        except Exception as exc:
            out.errors.append(f"{target}: {type(exc).__name__}: {exc}")
            return None
        pinned = self._pinned(spec.name, deploy, now=now, prefetch=prefetch)
        reason = ineligible_reason(spec, deploy, pinned=pinned)
        if (
            reason is None
            and members is not None
            and status.transition_id is None
            and partially_running(members)
        ):
            reason = "endpoint_partially_running"
        if reason is not None:
            out.ineligible[target] = reason
            new = status.interval_start != interval.start or status.schedule_version != version
            if new and interval.intent.desired_state is DesiredState.RUNNING:
                out.blocking[target] = (
                    reason  # it should acquire and cannot: nothing may be released for it
                )
            if status.phase != Phase.INELIGIBLE or status.reason != reason:
                said = replaced_verdict(pinned, deploy) if deploy is not None else None
                self.store.cas_status(
                    status,
                    now=now,
                    phase=Phase.INELIGIBLE.value,
                    reason=reason,
                    fix=said.fix if said is not None else fix_for(Phase.INELIGIBLE, reason),
                    schedule_version=version,
                    detail=said.detail if said is not None else {"source": ELIGIBILITY},
                )
            return None
        assert deploy is not None
        new = status.interval_start != interval.start or status.schedule_version != version
        # Re-examined every pass: eligibility's own verdict (its cause may be repaired), an
        # observe-only record, a plan never opened. Every other terminal phase waits for a new
        # interval or apply-now (R-PHASE).
        stale_phase = (
            (
                status.phase == Phase.INELIGIBLE
                and (status.detail or {}).get("source") == ELIGIBILITY
            )
            or status.phase == Phase.OBSERVING
            or (status.phase == Phase.PENDING and status.transition_id is None)
        )
        if new or stale_phase or (force and is_terminal(status.phase)):
            return Candidate(status, deploy, interval)
        if (
            status.phase == Phase.CONVERGED
            and interval.intent.desired_state is DesiredState.RUNNING
            and deploy.crash_loop is not None
            and deploy.restarts >= self.crash_loop_restarts
        ):
            self._crash_loop(status, deploy, now)
            return None
        if status.phase == Phase.CONVERGED and not matches(wanted(interval), observed(deploy)):
            out.drift.append(target)
            self.store.cas_status(
                status,
                now=now,
                phase=Phase.DRIFT_DETECTED.value,
                reason="drift_detected",
                fix=fix_for(Phase.DRIFT_DETECTED),
                detail={
                    "observed_state": deploy.state.value,
                    "observed_replicas": deploy.desired_replicas,
                },
                events=[{"kind": "drift_detected", "detail": {"state": deploy.state.value}}],
            )
        return None

    def _crash_loop(self, status: TargetStatusRow, deploy: DeployView, now: datetime) -> None:
        """A converged running target whose server crash-loops: terminal ``crash_loop``, with
        the kubelet's words and the fix; nothing is stopped or restarted (L3)."""
        said = verdict(
            Phase.CRASH_LOOP,
            extra=f"{deploy.id}: {deploy.crash_loop} (bound {self.crash_loop_restarts})",
            detail={"restarts": deploy.restarts, "state": deploy.state.value,
                    "ready_replicas": deploy.ready_replicas, "allocation_kept": True},
        )  # fmt: skip
        self.store.cas_status(
            status,
            now=now,
            phase=said.phase.value,
            reason=said.reason,
            fix=said.fix,
            detail=said.detail,
            events=[
                {
                    "kind": "crash_loop",
                    "detail": {"restarts": deploy.restarts, "message": deploy.crash_loop},
                }
            ],
        )

    def _pinned(
        self, schedule: str, deploy: DeployView | None, *, now: datetime, prefetch: Prefetch | None
    ) -> str | None:
        """The object ``schedule``'s claim of ``deploy`` is pinned to, pinning it at first sight
        (R-K8S-8). A store write, never a core one: observe mode pins too."""
        if deploy is None or deploy.instance is None:
            return None
        if prefetch is not None and prefetch.pins is not None and deploy.id in prefetch.pins:
            pinned = prefetch.pins[deploy.id]
        else:
            pinned = self.store.pins_for([deploy.id]).get(deploy.id)
        if pinned is None and deploy.state is not DeployState.DELETING:
            pinned = self.store.pin(schedule, deploy.id, deploy.instance, now=now)
            if prefetch is not None and prefetch.pins is not None:
                prefetch.pins[deploy.id] = pinned
        return pinned

    def _behind(
        self,
        status: TargetStatusRow,
        version: int,
        interval: IntentInterval,
        now: datetime,
        out: ScheduleOutcome,
    ) -> bool:
        """R-PASS-14: True when this pass is behind what is stored (it must plan nothing)."""
        stored = status.interval_start
        same = status.schedule_version == version
        if status.schedule_version < version:  # a new version plans from the present (R-NEXT-4:
            return False  # a stored interval of a stray future clock must not outlive it)
        if same and (stored is None or (stored <= now and interval.start >= stored)):
            return False
        out.behind.append(status.deploy_id)
        ahead_s = (stored - now).total_seconds() if stored is not None else 0.0
        if ahead_s > self.max_clock_skew_s:
            offsets: dict[str, Any] = {
                "writer": status.interval_writer,
                "writer_offset_s": status.interval_writer_offset_s,
                "observer": self.holder,
                "observer_offset_s": self.offset_s,
            }
            verdict = skew.blame(**offsets, bound_s=self.max_clock_skew_s)
            self.store.add_event(
                now,
                status.schedule,
                status.deploy_id,
                "clock_skew",
                reason=verdict.reason,
                detail=skew.detail(
                    verdict,
                    schedule=status.schedule,
                    stored=stored,
                    now=now,
                    skew_s=ahead_s,
                    bound_s=self.max_clock_skew_s,
                    **offsets,
                ),
            )
        return True

    def _written_by(self) -> dict[str, Any]:
        """Who writes an interval, and its clock's offset (``engine/skew.py``)."""
        return {"interval_writer": self.holder, "interval_writer_offset_s": self.offset_s}

    # -- observe mode ---------------------------------------------------------

    def _observe_only(
        self,
        spec: Schedule,
        version: int,
        cands: list[Candidate],
        now: datetime,
        out: ScheduleOutcome,
    ) -> None:
        for c in cands:
            steps = steps_for(wanted(c.interval), observed(c.deploy))
            out.observing.append(c.status.deploy_id)
            self.store.cas_status(
                c.status,
                now=now,
                phase=Phase.OBSERVING.value,
                reason=None,
                fix=None,
                schedule_version=version,
                interval_start=c.interval.start,
                interval_end=c.interval.end,
                **self._written_by(),
                intent=intent_doc(c.interval),
                transition_id=None,
                detail={"would": [{"step": s.kind.value, "replicas": s.replicas} for s in steps]},
            )

    # -- opening a plan ---------------------------------------------------------

    def _open(
        self,
        spec: Schedule,
        version: int,
        cands: list[Candidate],
        *,
        now: datetime,
        trigger: str,
        out: ScheduleOutcome,
        since: datetime,
        quiet: bool = False,
        blocked: dict[str, Verdict] | None = None,
    ) -> None:
        for c in cands:
            c.steps = steps_for(wanted(c.interval), observed(c.deploy))
        planned = {s.deploy_id: (s, wanted(c.interval), c.deploy) for c in cands for s in c.steps}
        try:
            refusals = {
                **(blocked or {}),
                **preflight(
                    self.core,
                    planned,
                    self.reservation_check,
                    release_first=spec.transition_order is TransitionOrder.RELEASE_FIRST,
                ),
            }
        except Transient as exc:  # preflight could not be read: no plan now, the next pass retries
            out.errors.append(f"preflight: {exc}")
            return
        tid = keys.transition_id(
            spec.name,
            version,
            [(c.status.deploy_id, c.interval.start, c.status.target_generation + 1) for c in cands],
        )
        boundary = max(c.interval.start for c in cands)
        # Boundary lag (R-PASS-5): from the boundary, or from the edit that created the interval;
        # a ready-by plan from its early start (R-NEXT-1).
        due = (
            out.lead.early_at
            if out.lead is not None and out.lead.boundary == boundary
            else boundary
        )
        lag = (now - max(due, since)).total_seconds() if boundary > SENTINEL_START else None
        transition = NewPlan(
            id=tid,
            schedule=spec.name,
            schedule_version=version,
            boundary_at=boundary,
            order=spec.transition_order,
            trigger=trigger,
            state=(
                PlanState.REFUSED
                if refusals
                else PlanState.OPEN
                if any(c.steps for c in cands)
                else PlanState.DONE
            ),
            targets=tuple(c.status.deploy_id for c in cands),
            created_at=now,
            lag_seconds=lag,
        )
        steps = [] if refusals else self._new_steps(spec, version, tid, cands, now)
        updates = [
            StatusMove(c.status, self._status_change(c, version, tid, refusals, now)) for c in cands
        ]
        # Older plans' unsubmitted steps are dropped in the same transaction (none when quiet).
        supersede = [] if quiet else [c.status.deploy_id for c in cands]
        if quiet and self.drafts is not None:
            self.drafts.append((Draft(transition, steps, updates), out, bool(refusals)))
            return
        if tid in self.store.open_many([Draft(transition, steps, updates, supersede)], now=now):
            (out.refused if refusals else out.opened).append(tid)
            self.record_lead(out, now)

    def record_lead(self, out: ScheduleOutcome, now: datetime) -> None:
        """A ``ready_by_lead`` event per acquiring target: the early start, its reason, its
        figures."""
        if out.lead is None:
            return
        for target in out.lead.acquiring:
            self.store.add_event(
                now,
                out.schedule,
                target,
                "ready_by_lead",
                reason="ready_by",
                detail=out.lead.as_dict(),
            )

    def _new_steps(
        self, spec: Schedule, version: int, tid: str, cands: list[Candidate], now: datetime
    ) -> list[NewStep]:
        rows: list[NewStep] = []
        by_deploy = {c.status.deploy_id: c for c in cands}
        for seq, step in enumerate(
            ordered([s for c in cands for s in c.steps], spec.transition_order)
        ):
            c = by_deploy[step.deploy_id]
            key = keys.idempotency_key(
                spec.name,
                version,
                step.deploy_id,
                c.interval.start,
                step.kind.value,
                c.status.target_generation + 1,
            )
            rows.append(
                NewStep(
                    id=keys.action_id(key),
                    idempotency_key=key,
                    transition_id=tid,
                    schedule=spec.name,
                    schedule_version=version,
                    deploy_id=step.deploy_id,
                    interval_start=c.interval.start,
                    step=step.kind,
                    order=step.order,
                    seq=seq,
                    replicas=step.replicas,
                    delta_replicas=step.delta_replicas,
                    etag_used=c.deploy.etag,
                    detail=StepPlan(
                        persist_replicas=step.persist_replicas,
                        allow_downtime=c.interval.intent.allow_downtime,
                        interval_end=c.interval.end,
                        endpoint=c.deploy.endpoint == c.deploy.id,
                        instance=c.deploy.instance,
                        unschedulable_grace_s=spec.unschedulable_grace_s,
                    ).as_detail(),
                    created_at=now,
                )
            )
        return rows

    def _status_change(
        self, c: Candidate, version: int, tid: str, refusals: dict[str, Verdict], now: datetime
    ) -> dict[str, Any]:
        base: dict[str, Any] = {
            "schedule_version": version,
            "interval_start": c.interval.start,
            "interval_end": c.interval.end,
            **self._written_by(),
            "intent": intent_doc(c.interval),
            "transition_id": tid,
            "target_generation": c.status.target_generation + 1,
            "converged_at": None,
            "last_action_id": None,
            "detail": {"observed_state": c.deploy.state.value},
        }
        deploy_id = c.status.deploy_id
        if refusals:
            own = refusals.get(deploy_id)
            if own is not None:
                return {**base, **own.changes()}
            first_id, first = sorted(refusals.items())[0]
            return {
                **base,
                "phase": first.phase.value,
                "reason": first.reason,
                "fix": f"{first_id} failed preflight ({first.reason}); nothing was executed, "
                f"{deploy_id} left as it is — {first.fix}",
            }
        if not c.steps:
            return {
                **base,
                "phase": Phase.CONVERGED.value,
                "reason": None,
                "fix": None,
                "converged_at": now,
            }
        return {**base, "phase": Phase.PENDING.value, "reason": None, "fix": None}


def capacity_deadline(
    interval_start: datetime, opened_at: datetime, interval_end: datetime | None, wait_s: float
) -> datetime:
    """When capacity waiting ends: nominal start (or a late opening) + wait, capped by the interval
    end."""
    nominal = max(interval_start, opened_at) if interval_start > SENTINEL_START else opened_at
    deadline = nominal + timedelta(seconds=wait_s)
    return min(deadline, interval_end) if interval_end is not None else deadline
