"""Executing one step: prerequisites, capacity preview, fence, submit (SPEC R-PASS-7…10).

A step never blocks: it either reaches the core (``accepted``), waits for
capacity (``capacity_wait``, with a deadline), stays ``submitting`` after a
lost response (the next caller resubmits with the same idempotency key), or
ends terminal with a reason and a fix text. The same function serves the
standalone pass and the Dagster release/acquire ops.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import PlannedStep, StepKind, Wanted
from gps_dagster.domain.spec import DesiredState
from gps_dagster.engine import endpoints
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.outcomes import Verdict, from_core_error, verdict
from gps_dagster.engine.planning import capacity_deadline
from gps_dagster.engine.preflight import ReservationCheck, preflight
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.ports import (
    AliasGuardUnavailable,
    Clock,
    Core,
    CoreError,
    DeployView,
    EtagMismatch,
    Insufficient,
    Transient,
)
from gps_dagster.store.records import ActionRow, TargetStatusRow
from gps_dagster.store.repository import Store

FINISHED = frozenset({"converged", "failed", "superseded", "cancelled"})
SUBMITTED = frozenset({"accepted", "converged", "superseded"})


def planned_step(a: ActionRow, deploy: DeployView) -> tuple[PlannedStep, Wanted, DeployView]:
    """A stored step back in the planner's terms (for a preflight re-check)."""
    kind = StepKind(a.step)
    detail = a.detail or {}
    step = PlannedStep(a.deploy_id, kind, a.replicas, a.delta_replicas or 0, bool(detail.get("persist_replicas")))
    state = DesiredState.STOPPED if kind is StepKind.STOP else DesiredState.RUNNING
    return step, Wanted(a.deploy_id, state, a.replicas, bool(detail.get("allow_downtime"))), deploy


class StepRunner:
    def __init__(
        self, store: Store, core: Core, clock: Clock, config: EngineConfig,
        reservation_check: ReservationCheck | None = None,
    ) -> None:
        self.store, self.core, self.clock, self.config = store, core, clock, config
        self.reservation_check = reservation_check

    def execute(self, action_id: str, *, submit: bool = True) -> StepOutcome:
        """Advance one step as far as it can go now (``submit=False``: preview only)."""
        a = self.store.get_action(action_id)
        if a is None:
            return StepOutcome(action_id, "", "failed", reason="unknown_step", fix="check the run config")
        if a.state in FINISHED or a.state == "accepted":
            return self._outcome(a, a.state)
        status = self.store.get_status(a.schedule, a.deploy_id)
        if status is None or status.transition_id != a.transition_id:
            self._finish(a, "superseded", "superseded")
            return self._outcome(a, "superseded")
        if a.state == "submitting":
            return self._resubmit(a, status)
        stale = self._stale(a)
        if stale is not None:  # an edit since the plan opened: no preview, no status write (R-MODEL-8)
            self._finish(a, "superseded", stale)
            return self._outcome(a, "superseded", reason=stale)
        waiting = self._prerequisite(a)
        if waiting is not None:
            return waiting
        if a.order == "acquire":
            held = self._capacity(a, status)
            if held is not None:
                return held
        if not submit:
            return self._outcome(a, "ready")
        return self._fence_and_submit(a, status)

    def _resubmit(self, a: ActionRow, status: TargetStatusRow) -> StepOutcome:
        """Crash safety (R-PASS-10) under the same fence as a first submit (R-PASS-1, R-PASS-7)."""
        reason = self.store.fence_check(a)
        if reason == "gate_not_enforce":
            return self._outcome(a, "submitting", reason=reason)  # resubmitted once the gate enforces
        if reason is not None:  # an edit, a delete or a lost claim since: the new plan decides again
            self._finish(a, "superseded", reason)
            return self._outcome(a, "superseded", reason=reason)
        return self._submit(a, status, resubmit=True)

    # -- prerequisites ---------------------------------------------------------

    def _stale(self, a: ActionRow) -> str | None:
        """Why the step's schedule snapshot is out of date (the fence re-checks this atomically)."""
        current = self.store.schedule_state(a.schedule)
        if current is None:
            return "schedule_deleted"
        version, enabled = current
        if version != a.schedule_version:
            return "schedule_version_changed"
        return None if enabled else "schedule_disabled"

    def _prerequisite(self, a: ActionRow) -> StepOutcome | None:
        tr = self.store.get_transition(a.transition_id)
        first = "release" if tr is None or tr.order == "release_first" else "acquire"
        if a.order == first:
            return None
        ready = SUBMITTED if first == "release" else frozenset({"converged", "superseded"})
        before = [x for x in self.store.list_actions(transition_id=a.transition_id) if x.order == first]
        broken = [x for x in before if x.state in ("failed", "cancelled")]
        if broken:
            culprit = broken[0]
            self._cancel(a, culprit)
            return StepOutcome(a.id, a.deploy_id, "cancelled", culprit.reason, culprit.reason, culprit.fix)
        if all(x.state in ready for x in before):
            return None
        return self._outcome(a, a.state)

    def _cancel(self, a: ActionRow, culprit: ActionRow) -> None:
        now = self.clock.now()
        status = self.store.get_status(a.schedule, a.deploy_id)
        if not self.store.update_action(a.id, expect=("pending", "capacity_wait"), now=now, state="cancelled",
                                        reason=culprit.reason, fix=culprit.fix, finished_at=now):
            return
        if status is not None and status.transition_id == a.transition_id:
            c_status = self.store.get_status(culprit.schedule, culprit.deploy_id)
            phase = c_status.phase if c_status is not None else Phase.PARTIAL_EXECUTION.value
            self.store.cas_status(
                status, now=now, phase=phase, reason=culprit.reason,
                fix=f"{culprit.deploy_id} {culprit.step} failed ({culprit.reason}); {a.deploy_id} not touched — {culprit.fix}",
            )
        self.close_transition(a.transition_id)

    # -- capacity ---------------------------------------------------------------

    def _capacity(self, a: ActionRow, status: TargetStatusRow) -> StepOutcome | None:
        now = self.clock.now()
        tr = self.store.get_transition(a.transition_id)
        end = (a.detail or {}).get("interval_end")
        deadline = a.deadline_at or capacity_deadline(
            a.interval_start, tr.created_at if tr else now, datetime.fromisoformat(end) if end else None,
            self.config.capacity_wait_s,
        )
        try:
            preview = endpoints.preview(self.core, a.deploy_id, max(a.delta_replicas or 1, 1))
        except Transient as exc:
            if now >= deadline:  # the capacity clock runs whether or not the core answers
                extra = f"no capacity preview for {a.deploy_id} by {deadline.isoformat()}: {exc}"
                return self.fail(a, status, verdict(Phase.CAPACITY_UNAVAILABLE, "core_unreadable", extra=extra))
            return self._outcome(a, a.state)
        except CoreError as exc:
            return self.fail(a, status, from_core_error(exc))
        if not isinstance(preview, Insufficient):
            return None
        detail = {**(a.detail or {}), "free_by_node": dict(preview.free_by_node), "preview_reason": preview.reason}
        if now >= deadline:
            extra = f"waited until {deadline.isoformat()} for {a.delta_replicas} replica group(s) of {a.deploy_id}"
            return self.fail(a, status, verdict(Phase.CAPACITY_UNAVAILABLE, extra=extra, detail=detail))
        if a.state != "capacity_wait":
            self.store.update_action(a.id, expect=("pending",), now=now, state="capacity_wait", deadline_at=deadline, detail=detail)
            self.store.cas_status(status, now=now, phase=Phase.CAPACITY_WAIT.value, reason=preview.reason, fix=None,
                                  detail={"deadline": deadline.isoformat(), "free_by_node": dict(preview.free_by_node)})
        return StepOutcome(a.id, a.deploy_id, "capacity_wait", Phase.CAPACITY_WAIT.value, preview.reason)

    # -- fence and submit -----------------------------------------------------

    def _fence_and_submit(self, a: ActionRow, status: TargetStatusRow) -> StepOutcome:
        now = self.clock.now()
        if a.order == "release":
            try:
                blocked = self._alias_blocked(a) if a.step == StepKind.STOP.value else None
                blocked = blocked or self._recheck_preflight(a)
            except Transient:
                return self._outcome(a, a.state, reason="transient")  # cannot verify now: next time
            if blocked is not None:
                return self.fail(a, status, blocked)
        phase = Phase.RELEASING if a.order == "release" else Phase.ACQUIRING
        fenced = self.store.fence(a, status, now=now, status_changes={"phase": phase.value, "reason": None, "fix": None})
        if not fenced.ok:
            if fenced.reason in ("gate_not_enforce", "lost_race"):
                return self._outcome(a, a.state, reason=fenced.reason)
            self._finish(a, "superseded", fenced.reason or "fenced_out")
            return self._outcome(a, "superseded", reason=fenced.reason)
        refreshed = self.store.get_action(a.id)
        assert refreshed is not None and fenced.status is not None
        return self._submit(refreshed, fenced.status, resubmit=False)

    def _recheck_preflight(self, a: ActionRow) -> Verdict | None:
        """Right before a release, the plan's acquiring steps are preflighted again (R-PASS-6).

        A plan may run long after it opened (a queued Dagster run, a gate that was off): a
        quota or billing refusal that appeared since must still stop the release.
        """
        actions = self.store.list_actions(transition_id=a.transition_id, states=("pending", "capacity_wait"))
        if not any(x.order == "acquire" for x in actions):
            return None
        tr = self.store.get_transition(a.transition_id)
        planned = {x.deploy_id: planned_step(x, endpoints.read_target(self.core, x.deploy_id)[0]) for x in actions}
        refusals = preflight(self.core, planned, self.reservation_check,
                             release_first=tr is None or tr.order == "release_first")
        refused = {d: v for d, v in refusals.items() if d != a.deploy_id and planned[d][0].order.value == "acquire"}
        if not refused:
            return None
        culprit, v = sorted(refused.items())[0]
        extra = f"{culprit} failed preflight ({v.reason}) when the release was due; {a.deploy_id} left as it is"
        return Verdict(v.phase, v.reason, f"{extra} — {v.fix}", v.detail)

    def _alias_blocked(self, a: ActionRow) -> Verdict | None:
        allow = bool((a.detail or {}).get("allow_downtime"))
        try:
            ids = [m.id for m in self.core.list_members(a.deploy_id)] if (a.detail or {}).get("endpoint") else [a.deploy_id]
        except Transient:
            raise
        except CoreError as exc:
            return verdict(Phase.ALIAS_BLOCKED, "alias_guard_read_error", extra=f"endpoint members unreadable: {exc}")
        for deploy_id in ids:
            try:
                info = self.core.alias_guard(deploy_id)
            except AliasGuardUnavailable as exc:
                return verdict(Phase.ALIAS_BLOCKED, f"alias_guard_{exc.reason}", extra=f"alias guard {exc.reason}")
            except CoreError as exc:
                return verdict(Phase.ALIAS_BLOCKED, "alias_guard_read_error", extra=str(exc))
            if info.has_alias and not allow:
                return verdict(Phase.ALIAS_BLOCKED, "alias_without_consent", extra=f"aliases {', '.join(info.aliases)}")
        return None

    def _submit(self, a: ActionRow, status: TargetStatusRow, *, resubmit: bool) -> StepOutcome:
        now = self.clock.now()
        try:
            ops = self._call_core(a)
        except Transient as exc:
            self.store.add_event(now, a.schedule, a.deploy_id, "submit_unconfirmed", reason="transient", detail={"error": str(exc), "action": a.id})
            late = self._late(a, since=a.submitted_at or now, now=now, why=f"the core did not confirm the submit: {exc}")
            return self.fail(a, status, late) if late else self._outcome(a, "submitting", reason="transient")
        except EtagMismatch:
            return self._etag_conflict(a, status)
        except endpoints.PartialExecution as part:
            extra = f"members not done: {', '.join(part.members)}"
            return self.fail(a, status, verdict(Phase.PARTIAL_EXECUTION, "partial_execution", extra=extra, detail={"receipt": part.receipt}))
        except CoreError as exc:
            return self.fail(a, status, from_core_error(exc))
        timeout = self.config.stop_timeout_s if a.order == "release" else self.config.readiness_timeout_s
        accepted = self.store.update_action(
            a.id, expect=("submitting",), now=now, state="accepted", accepted_at=now,
            operation_ids=[op.id for op in ops], deadline_at=now + timedelta(seconds=timeout),
        )
        if accepted:
            phase = Phase.RELEASING if a.order == "release" else Phase.AWAITING_READY
            events: list[dict[str, Any]] = [{"kind": "action_accepted", "detail": {"step": a.step, "operations": [op.id for op in ops], "resubmitted": resubmit}}]
            if a.step == StepKind.SCALE_DOWN.value:
                events.append({"kind": "capacity_reduced", "detail": {"replicas": a.replicas}})
            # CAS on the status this submit was fenced with: if anyone wrote since (the step may
            # already have converged), theirs is newer and stays (R-PASS-11: no regression).
            if status.transition_id == a.transition_id:
                self.store.cas_status(status, now=now, phase=phase.value, last_action_id=a.id, events=events)
        return self._outcome(a, "accepted")

    def _late(self, a: ActionRow, *, since: datetime, now: datetime, why: str) -> Verdict | None:
        """The terminal verdict of a step whose own clock ran out while the core would not answer."""
        release = a.order == "release"
        limit = self.config.stop_timeout_s if release else self.config.readiness_timeout_s
        if (now - since).total_seconds() < limit:
            return None
        phase = Phase.STOP_TIMEOUT if release else Phase.READINESS_TIMEOUT
        return verdict(phase, "core_unreadable", extra=f"{a.deploy_id} {a.step}: {why} for {limit:.0f} s")

    def _call_core(self, a: ActionRow) -> list[Any]:
        etag = a.etag_used or ""
        key = a.idempotency_key
        if (a.detail or {}).get("endpoint"):
            if a.step == StepKind.STOP.value:
                allow = bool((a.detail or {}).get("allow_downtime"))
                return endpoints.stop_members(self.core, a.deploy_id, key, allow_aliased_downtime=allow)
            return endpoints.start_members(self.core, a.deploy_id, key)
        if a.step == StepKind.STOP.value:
            allow = bool((a.detail or {}).get("allow_downtime"))
            return [self.core.stop(a.deploy_id, etag=etag, allow_aliased_downtime=allow, idempotency_key=key)]
        if a.step in (StepKind.SCALE_DOWN.value, StepKind.SCALE_UP.value):
            assert a.replicas is not None
            return [self.core.set_replica_intent(a.deploy_id, a.replicas, etag=etag, idempotency_key=key)]
        ops = []
        if (a.detail or {}).get("persist_replicas") and a.replicas is not None:
            ops.append(self.core.set_replica_intent(a.deploy_id, a.replicas, etag=etag, idempotency_key=f"{key}/persist"))
            etag = self.core.get_deploy(a.deploy_id).etag  # R-SCALE-5: a fresh ETag, then Start
        ops.append(self.core.start(a.deploy_id, etag=etag, idempotency_key=key))
        return ops

    def _etag_conflict(self, a: ActionRow, status: TargetStatusRow) -> StepOutcome:
        """The deploy changed since the snapshot: re-read it and decide again next time.

        Bounded by the step's own clock: a deploy that keeps changing under us past the
        stop (release) or readiness (acquire) timeout ends the step terminal, never a loop.
        """
        now = self.clock.now()
        release = a.order == "release"
        limit = self.config.stop_timeout_s if release else self.config.readiness_timeout_s
        if (now - a.created_at).total_seconds() >= limit:
            phase = Phase.STOP_TIMEOUT if release else Phase.READINESS_TIMEOUT
            extra = f"{a.deploy_id} kept changing under the engine (ETag conflicts) for {limit:.0f} s"
            return self.fail(a, status, verdict(phase, "etag_conflict", extra=extra))
        try:
            fresh = self.core.get_deploy(a.deploy_id).etag
        except CoreError as exc:
            return self.fail(a, status, from_core_error(exc))
        self.store.update_action(a.id, expect=("submitting",), now=now, state="pending", etag_used=fresh)
        self.store.add_event(now, a.schedule, a.deploy_id, "etag_conflict", detail={"action": a.id})
        return self._outcome(a, "pending", reason="etag_conflict")

    # -- endings ---------------------------------------------------------------

    def fail(self, a: ActionRow, status: TargetStatusRow, v: Verdict) -> StepOutcome:
        now = self.clock.now()
        moved = self.store.update_action(
            a.id, expect=("pending", "capacity_wait", "submitting", "accepted"), now=now, state="failed",
            reason=v.reason, fix=v.fix, finished_at=now, detail={**(a.detail or {}), **(v.detail or {})},
        )
        if moved:
            current = self.store.get_status(a.schedule, a.deploy_id) or status
            if current.transition_id == a.transition_id:
                self.store.cas_status(current, now=now, **v.changes())
            self._cancel_dependents(a)
            self.close_transition(a.transition_id)
        return StepOutcome(a.id, a.deploy_id, "failed", v.phase.value, v.reason, v.fix)

    def _cancel_dependents(self, failed: ActionRow) -> None:
        """Steps that were to follow a failed one end terminal now, whoever drives the plan."""
        tr = self.store.get_transition(failed.transition_id)
        first = "release" if tr is None or tr.order == "release_first" else "acquire"
        if failed.order != first:
            return
        culprit = self.store.get_action(failed.id) or failed
        for x in self.store.list_actions(transition_id=failed.transition_id, states=("pending", "capacity_wait")):
            if x.order != first:
                self._cancel(x, culprit)

    def _finish(self, a: ActionRow, state: str, reason: str) -> None:
        now = self.clock.now()
        self.store.update_action(a.id, expect=("pending", "capacity_wait", "submitting"), now=now, state=state,
                                 reason=reason, finished_at=now)
        self.close_transition(a.transition_id)

    def close_transition(self, transition_id: str) -> None:
        actions = self.store.list_actions(transition_id=transition_id)
        if actions and all(x.state in FINISHED for x in actions):
            failed = any(x.state in ("failed", "cancelled") for x in actions)
            self.store.set_transition_state(transition_id, "failed" if failed else "done")

    @staticmethod
    def _outcome(a: ActionRow, state: str, *, reason: str | None = None) -> StepOutcome:
        return StepOutcome(a.id, a.deploy_id, state, None, reason or a.reason, a.fix)
