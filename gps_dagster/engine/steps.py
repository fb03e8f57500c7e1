"""Executing one step: prerequisites, capacity preview, fence, submit (SPEC R-PASS-7…10).

A step never blocks and never raises: it either reaches the core
(``accepted``), waits for capacity (``capacity_wait``, with a deadline), stays
``submitting`` after a lost response (the next caller resubmits with the same
idempotency key), or ends terminal with a reason and a fix text. Whatever is
raised on the way has one owner (``failures.judge``, R-PASS-15): a retry on
the step's own clock, or a terminal phase. The same function serves the
standalone pass and the Dagster release/acquire ops.
"""
# Decisions embodied here (docs/decisions.md):
# * “ETag conflicts on submit”
# * “Resubmissions are fenced too”
# * “Preflight is re-checked right before a release”

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from gps_dagster.domain import step_rules
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import PlannedStep, StepKind, Wanted
from gps_dagster.domain.spec import DesiredState
from gps_dagster.engine import endpoints
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.eligibility import replaced_verdict
from gps_dagster.engine.endings import Endings, first_order
from gps_dagster.engine.failures import RETRY_SINCE, End, Retry, clock_of, judge
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.engine.preflight import ReservationCheck, preflight
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.step_writes import accepted_write, capacity_write, wait_deadline
from gps_dagster.engine.store_ports import StepStore
from gps_dagster.ports import (
    AliasGuardUnavailable,
    Clock,
    CoreError,
    DeployView,
    EtagMismatch,
    Insufficient,
    NotFound,
    StepCore,
    Transient,
)
from gps_dagster.store.errors import StoreUnavailable
from gps_dagster.store.plans import FINISHED, StepWrite
from gps_dagster.store.records import ActionRow, TargetStatusRow

log = logging.getLogger(__name__)

SUBMITTED = step_rules.SUBMITTED


def planned_step(a: ActionRow, deploy: DeployView) -> tuple[PlannedStep, Wanted, DeployView]:
    """A stored step back in the planner's terms (for a preflight re-check)."""
    kind = StepKind(a.step)
    detail = a.detail or {}
    step = PlannedStep(
        a.deploy_id, kind, a.replicas, a.delta_replicas or 0, bool(detail.get("persist_replicas"))
    )
    state = DesiredState.STOPPED if kind is StepKind.STOP else DesiredState.RUNNING
    return step, Wanted(a.deploy_id, state, a.replicas, bool(detail.get("allow_downtime"))), deploy


class StepRunner:
    def __init__(
        self,
        store: StepStore,
        core: StepCore,
        clock: Clock,
        config: EngineConfig,
        reservation_check: ReservationCheck | None = None,
    ) -> None:
        self.store, self.core, self.clock, self.config = store, core, clock, config
        self.reservation_check = reservation_check
        self.endings = Endings(store, clock)

    def execute(self, action_id: str, *, submit: bool = True) -> StepOutcome:
        """Advance one step as far as it can go now (``submit=False``: preview only); never raises."""
        seen: ActionRow | None = None
        try:
            seen = self.store.get_action(action_id)
            if seen is None:
                return StepOutcome(
                    action_id, "", "failed", reason="unknown_step", fix="check the run config"
                )
            return self._advance(seen, submit=submit)
        except Exception as exc:
            return self.owned(exc, action_id, seen)

    def fail(self, a: ActionRow, v: Verdict) -> StepOutcome:
        return self.endings.fail(a, v)

    # -- the one owner of every exception (R-PASS-15) ------------------------------

    def owned(
        self, exc: Exception, action_id: str, seen: ActionRow | None, *, event: str = "step_retry"
    ) -> StepOutcome:
        """Apply ``judge``'s decision for ``exc`` raised by step ``action_id``; never raises."""
        try:
            return self._own(exc, action_id, seen, event)
        except StoreUnavailable as down:
            return self._unwritable(action_id, seen, down)
        except Exception:
            log.exception("could not record the error of step %s (%s)", action_id, exc)
            state = seen.state if seen is not None else "pending"
            return StepOutcome(
                action_id, seen.deploy_id if seen else "", state, reason="engine_error"
            )

    def _own(
        self, exc: Exception, action_id: str, seen: ActionRow | None, event: str
    ) -> StepOutcome:
        if isinstance(exc, StoreUnavailable):
            return self._unwritable(action_id, seen, exc)
        a = self.store.get_action(action_id) or seen  # the step may have moved before it raised
        if a is None:
            return StepOutcome(
                action_id, "", "failed", reason="unknown_step", fix="check the run config"
            )
        if a.state in FINISHED:
            return self._outcome(a, a.state)
        now = self.clock.now()
        step_clock = clock_of(a, self.config, now=now, opened_at=a.created_at)
        decision = judge(
            exc, step=a, now=now, clock=step_clock, retry_in_s=self.config.pass_interval_s
        )
        _log(exc, a, decision)
        if isinstance(decision, End):
            return self.endings.fail(a, decision.verdict)
        self._note_retry(a, decision, event, now)
        return StepOutcome(a.id, a.deploy_id, a.state, None, decision.reason, decision.message)

    def _note_retry(self, a: ActionRow, decision: Retry, event: str, now: datetime) -> None:
        """An event for every error (R-PASS-11); a release not yet submitted starts its clock."""
        changes: dict[str, Any] = {}
        detail = a.detail or {}
        if a.order == "release" and a.state == "pending" and RETRY_SINCE not in detail:
            changes["detail"] = {**detail, RETRY_SINCE: now.isoformat()}
        deadline = decision.deadline.isoformat() if decision.deadline else None
        ev = {
            "kind": event,
            "reason": decision.reason,
            "detail": {
                "action": a.id,
                "step": a.step,
                "error": decision.message,
                "deadline": deadline,
            },
        }
        self.store.write_steps([StepWrite(a.id, (a.state,), changes, events=(ev,))], now=now)

    @staticmethod
    def _unwritable(action_id: str, seen: ActionRow | None, exc: StoreUnavailable) -> StepOutcome:
        log.warning("step %s: %s; retried when the store answers", action_id, exc)
        state = seen.state if seen is not None else "pending"
        return StepOutcome(
            action_id, seen.deploy_id if seen else "", state, None, exc.reason, exc.fix
        )

    # -- the way through -----------------------------------------------------------

    def _advance(self, a: ActionRow, *, submit: bool) -> StepOutcome:
        if a.state in FINISHED or a.state == "accepted":
            return self._outcome(a, a.state)
        status = self.store.get_status(a.schedule, a.deploy_id)
        if status is None or status.transition_id != a.transition_id:
            self.endings.finish(a, "superseded", "superseded")
            return self._outcome(a, "superseded")
        if a.state == "submitting":
            return self._resubmit(a, status)
        stale = self._stale(a)
        # an edit since the plan opened: no preview, no status write (R-MODEL-8)
        if stale is not None:
            self.endings.finish(a, "superseded", stale)
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
        outcome = step_rules.fence_outcome(reason)
        if outcome == "stay":  # resubmitted once the gate enforces
            return self._outcome(a, "submitting", reason=reason)
        if outcome == "superseded":
            return self.superseded(a, reason)
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
        first = first_order(tr.order if tr is not None else None)
        before = (
            []
            if a.order == first
            else [  # the plan's first half (read only when asked)
                x
                for x in self.store.list_actions(transition_id=a.transition_id)
                if x.order == first
            ]
        )
        move = step_rules.may_move(a.order, first, [x.state for x in before])
        if move.verdict == "broken" and move.index is not None:
            return self.endings.cancel(a, before[move.index])
        return None if move.verdict == "go" else self._outcome(a, a.state)

    # -- capacity ---------------------------------------------------------------

    def _capacity(self, a: ActionRow, status: TargetStatusRow) -> StepOutcome | None:
        now = self.clock.now()
        deadline = wait_deadline(a, self.config)
        preview = endpoints.preview(self.core, a.deploy_id, max(a.delta_replicas or 1, 1))
        call = step_rules.capacity_call(
            fits=not isinstance(preview, Insufficient), now=now, deadline=deadline, state=a.state
        )
        if call == "fits" or not isinstance(preview, Insufficient):
            return None
        if call == "timeout":
            detail = {
                **(a.detail or {}),
                "free_by_node": dict(preview.free_by_node),
                "preview_reason": preview.reason,
            }
            extra = f"waited until {deadline.isoformat()} for {a.delta_replicas} replica group(s) of {a.deploy_id}"
            return self.endings.fail(
                a, verdict(Phase.CAPACITY_UNAVAILABLE, extra=extra, detail=detail)
            )
        if call == "enter":
            self.store.write_steps([capacity_write(a, preview, deadline, status)], now=now)
        return StepOutcome(
            a.id, a.deploy_id, "capacity_wait", Phase.CAPACITY_WAIT.value, preview.reason
        )

    # -- fence and submit -----------------------------------------------------

    def _fence_and_submit(self, a: ActionRow, status: TargetStatusRow) -> StepOutcome:
        now = self.clock.now()
        if a.order == "release":  # a read error here is the owner's: retried on the release's clock
            blocked = self._alias_blocked(a) if a.step == StepKind.STOP.value else None
            blocked = blocked or self._recheck_preflight(a)
            if blocked is not None:
                return self.endings.fail(a, blocked)
        phase = Phase.RELEASING if a.order == "release" else Phase.ACQUIRING
        fenced = self.store.fence(
            a, status, now=now, status_changes={"phase": phase.value, "reason": None, "fix": None}
        )
        outcome = step_rules.fence_outcome(None if fenced.ok else fenced.reason or "fenced_out")
        if outcome == "stay":
            self._clear_retry(a, now)
            return self._outcome(a, a.state, reason=fenced.reason)
        if outcome == "superseded":
            return self.superseded(a, fenced.reason)
        refreshed = self.store.get_action(a.id)
        assert refreshed is not None and fenced.status is not None
        return self._submit(refreshed, fenced.status, resubmit=False)

    def _clear_retry(self, a: ActionRow, now: datetime) -> None:
        """The checks passed: a later failure starts a fresh clock."""
        if RETRY_SINCE in (a.detail or {}):
            detail = {k: v for k, v in (a.detail or {}).items() if k != RETRY_SINCE}
            self.store.update_action(a.id, expect=(a.state,), now=now, detail=detail)

    def _recheck_preflight(self, a: ActionRow) -> Verdict | None:
        """Right before a release, the plan's acquiring steps are preflighted again (R-PASS-6).

        A plan may run long after it opened (a queued Dagster run, a gate that was off): a
        quota or billing refusal that appeared since — or an acquiring deploy deleted since —
        must still stop the release.
        """
        actions = self.store.list_actions(
            transition_id=a.transition_id, states=("pending", "capacity_wait")
        )
        acquiring = {x.deploy_id for x in actions if x.order == "acquire"}
        if not acquiring:
            return None
        tr = self.store.get_transition(a.transition_id)
        planned: dict[str, tuple[PlannedStep, Wanted, DeployView]] = {}
        gone: dict[str, Verdict] = {}
        for x in actions:
            try:
                planned[x.deploy_id] = planned_step(
                    x, endpoints.read_target(self.core, x.deploy_id)[0]
                )
            except NotFound as exc:
                gone[x.deploy_id] = verdict(
                    Phase.INELIGIBLE, "target_failed", extra=f"{x.deploy_id} is gone: {exc}"
                )
        refusals = {
            **gone,
            **preflight(
                self.core,
                planned,
                self.reservation_check,
                release_first=first_order(tr.order if tr else None) == "release",
            ),
        }
        culprit = step_rules.recheck_culprit(a.deploy_id, acquiring, refusals)
        if culprit is None:
            return None
        v = refusals[culprit]
        text = step_rules.recheck_text(a.deploy_id, culprit, v.reason, v.fix)
        return Verdict(v.phase, v.reason, text, v.detail)

    def _alias_blocked(self, a: ActionRow) -> Verdict | None:
        allow = bool((a.detail or {}).get("allow_downtime"))
        try:
            ids = (
                [m.id for m in self.core.list_members(a.deploy_id)]
                if (a.detail or {}).get("endpoint")
                else [a.deploy_id]
            )
        except Transient:
            raise
        except CoreError as exc:
            return verdict(
                Phase.ALIAS_BLOCKED,
                "alias_guard_read_error",
                extra=f"endpoint members unreadable: {exc}",
            )
        for deploy_id in ids:
            try:
                info = self.core.alias_guard(deploy_id)
            except AliasGuardUnavailable as exc:
                return verdict(
                    Phase.ALIAS_BLOCKED,
                    f"alias_guard_{exc.reason}",
                    extra=f"alias guard {exc.reason}",
                )
            except CoreError as exc:
                return verdict(Phase.ALIAS_BLOCKED, "alias_guard_read_error", extra=str(exc))
            if info.has_alias and not allow:
                reason, text, detail = step_rules.alias_refusal(deploy_id, info.aliases)
                return verdict(Phase.ALIAS_BLOCKED, reason, extra=text, detail=detail)
        return None

    def _submit(self, a: ActionRow, status: TargetStatusRow, *, resubmit: bool) -> StepOutcome:
        now = self.clock.now()
        try:
            ops = self._call_core(a)
        except Exception as exc:
            return self.submit_failed(a, exc)
        self.store.write_steps(
            [accepted_write(a, ops, status, self.config, now, resubmit)], now=now
        )
        return self._outcome(a, "accepted")

    def submit_failed(self, a: ActionRow, exc: Exception) -> StepOutcome:
        """What a submit that raised ``exc`` becomes (the step is ``submitting``)."""
        # the answer was lost: retried with the same key, on the submit's own clock
        if isinstance(exc, Transient):
            return self.owned(exc, a.id, a, event="submit_unconfirmed")
        if isinstance(exc, EtagMismatch):
            return self._etag_conflict(a)
        if isinstance(exc, endpoints.PartialExecution):
            extra = f"members not done: {', '.join(exc.members)}"
            return self.endings.fail(
                a,
                verdict(
                    Phase.PARTIAL_EXECUTION,
                    "partial_execution",
                    extra=extra,
                    detail={"receipt": exc.receipt},
                ),
            )
        return self.owned(exc, a.id, a)

    def call_core(self, a: ActionRow) -> list[Any]:
        """The core call(s) of step ``a`` with its idempotency key (raises what the core raises)."""
        return self._call_core(a)

    def _call_core(self, a: ActionRow) -> list[Any]:
        etag = a.etag_used or ""
        key = a.idempotency_key
        if (a.detail or {}).get("endpoint"):
            if a.step == StepKind.STOP.value:
                allow = bool((a.detail or {}).get("allow_downtime"))
                return endpoints.stop_members(
                    self.core, a.deploy_id, key, allow_aliased_downtime=allow
                )
            return endpoints.start_members(self.core, a.deploy_id, key)
        if a.step == StepKind.STOP.value:
            allow = bool((a.detail or {}).get("allow_downtime"))
            return [
                self.core.stop(
                    a.deploy_id, etag=etag, allow_aliased_downtime=allow, idempotency_key=key
                )
            ]
        if a.step in (StepKind.SCALE_DOWN.value, StepKind.SCALE_UP.value):
            assert a.replicas is not None
            return [
                self.core.set_replica_intent(
                    a.deploy_id, a.replicas, etag=etag, idempotency_key=key
                )
            ]
        ops = []
        if (a.detail or {}).get("persist_replicas") and a.replicas is not None:
            ops.append(
                self.core.set_replica_intent(
                    a.deploy_id, a.replicas, etag=etag, idempotency_key=f"{key}/persist"
                )
            )
            etag = self.core.get_deploy(a.deploy_id).etag  # R-SCALE-5: a fresh ETag, then Start
        ops.append(self.core.start(a.deploy_id, etag=etag, idempotency_key=key))
        return ops

    def _etag_conflict(self, a: ActionRow) -> StepOutcome:
        """The deploy changed since the snapshot: re-read it and decide again next time.

        Bounded by the step's own clock: a deploy that keeps changing under us past the
        stop (release) or readiness (acquire) timeout ends the step terminal, never a loop.
        """
        now = self.clock.now()
        release = a.order == "release"
        limit = self.config.stop_timeout_s if release else self.config.readiness_timeout_s
        if (now - a.created_at).total_seconds() >= limit:
            phase = Phase.STOP_TIMEOUT if release else Phase.READINESS_TIMEOUT
            extra = (
                f"{a.deploy_id} kept changing under the engine (ETag conflicts) for {limit:.0f} s"
            )
            return self.endings.fail(a, verdict(phase, "etag_conflict", extra=extra))
        view = self.core.get_deploy(a.deploy_id)  # a read error: the owner's, on the submit's clock
        gone = replaced_verdict((a.detail or {}).get("instance"), view)
        if gone is not None:  # R-K8S-8: never retry a step on the object that replaced its own
            return self.endings.fail(a, gone)
        fresh = view.etag
        self.store.write_steps(
            [
                StepWrite(
                    a.id,
                    ("submitting",),
                    {"state": "pending", "etag_used": fresh},
                    events=({"kind": "etag_conflict", "detail": {"action": a.id}},),
                )
            ],
            now=now,
        )
        return self._outcome(a, "pending", reason="etag_conflict")

    def superseded(self, a: ActionRow, reason: str | None) -> StepOutcome:
        """A fence refused the step for good (``fence_outcome``): the new plan decides again."""
        self.endings.finish(a, "superseded", reason or "fenced_out")
        return self._outcome(a, "superseded", reason=reason)

    @staticmethod
    def _outcome(a: ActionRow, state: str, *, reason: str | None = None) -> StepOutcome:
        return StepOutcome(a.id, a.deploy_id, state, None, reason or a.reason, a.fix)


def _log(exc: Exception, a: ActionRow, decision: Retry | End) -> None:
    where = f"step {a.id} ({a.schedule} {a.deploy_id} {a.step}, {a.state})"
    if isinstance(decision, End):
        log.warning(
            "%s ends %s (%s): %s", where, decision.verdict.phase.value, decision.verdict.reason, exc
        )
    elif decision.reason == "engine_error":
        log.error("%s: unexpected error, retried until %s", where, decision.deadline, exc_info=exc)
    else:
        log.warning("%s: %s; retried until %s", where, decision.message, decision.deadline)
