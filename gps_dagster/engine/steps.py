"""Executing steps: read, decide, write — one step is a batch of one (SPEC R-PASS-7…10).

``StepRunner`` moves any number of steps with the same three moves, whoever asks (a pass's
batch, a Dagster batch op, one Dagster op, a preview):

1. read: the steps, their plans, statuses and schedule versions in one read of each (a pass
   hands its own); the deploys the acquires and the releases' re-checks need in one
   ``core.get_deploys``;
2. decide, with the pure rules of ``domain/step_rules.py``: finished, superseded (another
   plan, an edit, a delete), resubmitted, cancelled behind a failed step, waiting on the plan's
   first half, a release's re-checks (alias guard, preflight of the plan's acquiring steps: in
   one core session; not for the plans in ``fresh``, preflighted moments ago by the caller's own
   pass), an acquire's capacity (previews in core sessions: together where they count each
   other's fits, else each fit submitted before the next preview);
3. write: one fence of every step cleared (``Store.fence_many``), one ``Core.submit_many``
   (each step its own idempotency key), one accepted write (each a CAS on the status its fence
   left); the endings (failed, superseded, cancelled) as ``Endings`` writes them.

A step never blocks nor raises: it is ``accepted``, waits for capacity (with a deadline), stays
``submitting`` after a lost response (resubmitted with the same key), or ends terminal with a
reason and a fix. What is raised has one owner (``step_owner.StepOwner``, R-PASS-15).
"""
# Decisions embodied here (docs/decisions.md):
# * “ETag conflicts on submit”
# * “Resubmissions are fenced too”
# * “Preflight is re-checked right before a release”
# * “A batch of schedules shares its round trips”
# * “Acquires previewed together only where previews count each other”
# * “A pre-armed run's releases are not re-checked after its own pass”
# * “One step executor: a step is a batch of one”
# * “A boundary's releases go before its acquires, across due batches”

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

from gps_dagster.domain import step_rules
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_plan import RETRY_SINCE
from gps_dagster.domain.step_state import FINISHED, Gate, StepState
from gps_dagster.engine import endpoints
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.eligibility import replaced_verdict
from gps_dagster.engine.endings import Endings, first_order
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.engine.preflight import ReservationCheck
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.step_calls import (
    MOVABLE,
    Plan,
    Refusals,
    Snapshot,
    alias_verdict,
    call_core,
    core_session,
    counts_fits,
    plain_acquire,
    plan_refusals,
    recheck_verdict,
    submission,
)
from gps_dagster.engine.step_owner import StepOwner
from gps_dagster.engine.step_writes import accepted_write, capacity_write, etag_write, wait_deadline
from gps_dagster.engine.store_ports import StepStore
from gps_dagster.ports import Clock, DeployView, EtagMismatch, Insufficient, StepCore, Transient
from gps_dagster.store.plans import StepWrite
from gps_dagster.store.records import ActionRow, TargetStatusRow

log = logging.getLogger(__name__)

Later = list[tuple[ActionRow, Callable[[], StepOutcome]]]


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
        self.owner = StepOwner(store, clock, config, self.endings)

    # -- the entry points ----------------------------------------------------------

    def execute(self, action_id: str, *, submit: bool = True) -> StepOutcome:
        """Advance one step as far as it can go now (``submit=False``: preview only, ``ready``
        when it could be fenced); never raises. A batch of one."""
        return self.execute_many([action_id], submit=submit)[0]

    def execute_many(
        self, step_ids: Sequence[str], *, fresh: Collection[str] = (), submit: bool = True
    ) -> list[StepOutcome]:
        """The outcome of each of ``step_ids`` in order (no other step); never raises for a step.
        ``fresh``: plans the caller's pass preflighted moments ago (releases not re-checked)."""
        ids = list(dict.fromkeys(step_ids))
        got: dict[str, StepOutcome] = {}
        waiting = self._given(ids, got, fresh, submit, last=False)
        if waiting:  # behind a step of this call that just moved (releases and acquires mixed)
            self._given(waiting, got, fresh, submit, last=True)
        return [got[i] for i in step_ids]

    def run(
        self,
        schedules: list[str],
        fresh: Collection[str],
        reads: Mapping[str, DeployView],
        *,
        first_only: bool = False,
        skip: Collection[str] = (),
    ) -> list[StepOutcome]:
        """A pass's batch: the movable steps of ``schedules``' open plans but ``skip``, in plan
        order, then a round for what that unlocked; ``first_only``: one round of first halves."""
        out: list[StepOutcome] = []
        done: set[str] = set(skip)
        for _round in range(1 if first_only else 2):
            plans = self.store.open_plans(schedules)
            if not plans:
                break
            names = sorted({tr.schedule for tr, _ in plans})
            snap = Snapshot(
                {tr.id: (tr, steps) for tr, steps in plans},
                self.store.statuses_for(names),
                self.store.schedule_states(names),
                reads,
                recheck_reads=False,
            )
            steps = [
                a
                for tr, plan_steps in plans
                for a in sorted(plan_steps, key=lambda x: x.seq)
                if a.id not in done
                and a.state in (*MOVABLE, StepState.SUBMITTING)
                and (not first_only or a.order == first_order(tr.order))
            ]
            got: dict[str, StepOutcome] = {}
            self._step(steps, snap, got, fresh, submit=True)
            done.update(got)
            out += got.values()
            if not any(o.state == StepState.ACCEPTED for o in got.values()):
                break
        return out

    def _given(
        self,
        ids: list[str],
        got: dict[str, StepOutcome],
        fresh: Collection[str],
        submit: bool,
        *,
        last: bool,
    ) -> list[str]:
        """Read ``ids`` and what they need, then move them; returns those still waiting."""
        try:
            rows = self.store.actions_by_id(ids)
            names = sorted({a.schedule for a in rows.values()})
            plans: dict[str, Plan] = {tr.id: (tr, s) for tr, s in self.store.open_plans(names)}
            snap = Snapshot(
                plans, self.store.statuses_for(names), self.store.schedule_states(names), {}
            )
        except Exception as exc:  # each step's owner decides
            got.update({i: self.owned(exc, i, None) for i in ids})
            return []
        for i in ids:
            if i not in rows:
                got[i] = StepOutcome(
                    i, "", StepState.FAILED, reason="unknown_step", fix="check the run config"
                )
        steps = [rows[i] for i in ids if i in rows]
        if submit:
            snap.reads = self._deploys(steps, plans, fresh)
        waiting = set(self._step(steps, snap, got, fresh, submit=submit))
        if not last and any(got[a.id].state != a.state for a in steps if a.id in got):
            return [a.id for a in steps if a.id in waiting]  # asked again after one more read
        got.update({a.id: self._outcome(a, a.state) for a in steps if a.id in waiting})
        return []

    def _deploys(
        self, steps: list[ActionRow], plans: Mapping[str, Plan], fresh: Collection[str]
    ) -> dict[str, DeployView]:
        """One read of the acquires' deploys and of every deploy the releases' re-checks need
        (none for the releases of ``fresh`` plans)."""
        wanted = {a.deploy_id for a in steps if a.order == Order.ACQUIRE and a.state in MOVABLE}
        for tid in {a.transition_id for a in steps if a.order == Order.RELEASE} - set(fresh):
            _tr, plan_steps = plans.get(tid, (None, []))
            wanted.update(x.deploy_id for x in plan_steps if x.state in MOVABLE)
        if not wanted:
            return {}
        try:
            return dict(self.core.get_deploys(sorted(wanted)))
        except Exception as exc:  # those deploys are then read one by one, errors owned per step
            log.warning("batched deploy read failed (%s); those steps read one by one", exc)
            return {}

    # -- decide --------------------------------------------------------------------

    def _step(
        self,
        steps: list[ActionRow],
        snap: Snapshot,
        got: dict[str, StepOutcome],
        fresh: Collection[str],
        *,
        submit: bool,
    ) -> list[str]:
        """Decide each of ``steps``, then write; the outcomes go to ``got``, returns the ids of
        those waiting on their plan's first half (no outcome)."""
        lanes: dict[str, list[ActionRow]] = {"resubmit": [], "release": [], "acquire": []}
        waiting: list[str] = []
        for a in steps:
            try:
                lane = self._lane(a, snap, got)
            except Exception as exc:  # the step's owner decides
                got[a.id] = self.owned(exc, a.id, a)
                continue
            if lane == "wait":
                waiting.append(a.id)
            elif lane in lanes:
                lanes[lane].append(a)
        self._resubmit(lanes["resubmit"], snap, got)
        if submit:
            cleared = self._rechecked(lanes["release"], snap, fresh, got)
            self._submit_all(cleared, snap, got)
        else:
            got.update({a.id: self._outcome(a, "ready") for a in lanes["release"]})
        self._acquire_all(lanes["acquire"], snap, got, submit=submit)
        return waiting

    def _lane(self, a: ActionRow, snap: Snapshot, got: dict[str, StepOutcome]) -> str:
        """``done`` (its outcome is in ``got``), ``resubmit``, ``wait``, ``release``,
        ``acquire``."""
        if a.state in FINISHED or a.state == StepState.ACCEPTED:
            got[a.id] = self._outcome(a, a.state)
            return "done"
        status = snap.statuses.get((a.schedule, a.deploy_id))
        if status is None or status.transition_id != a.transition_id:
            self.endings.finish(a, StepState.SUPERSEDED, "superseded")
            got[a.id] = self._outcome(a, StepState.SUPERSEDED)
            return "done"
        if a.state == StepState.SUBMITTING:
            return "resubmit"
        version, enabled = snap.versions.get(a.schedule, (None, False))
        # an edit since the plan opened: no preview, no status write (R-MODEL-8); the fence
        # re-checks it atomically
        stale = step_rules.fence_refusal(
            schedule=a.schedule,
            version=a.schedule_version,
            stored_version=version,
            enabled=enabled,
            gate=Gate.ENFORCE,
            owner=a.schedule,
        )
        if stale is not None:
            self.endings.finish(a, StepState.SUPERSEDED, stale)
            got[a.id] = self._outcome(a, StepState.SUPERSEDED, reason=stale)
            return "done"
        tr, plan_steps = snap.plans.get(a.transition_id) or self._plan(a)
        first = first_order(tr.order if tr is not None else None)
        before = [] if a.order == first else [x for x in plan_steps if x.order == first]
        move = step_rules.may_move(a.order, first, [x.state for x in before])
        if move.verdict == "broken" and move.index is not None:
            got[a.id] = self.endings.cancel(a, before[move.index])
            return "done"
        return a.order if move.verdict == "go" else "wait"

    def _plan(self, a: ActionRow) -> Plan:
        """A plan not open any more (read on its own)."""
        tr = self.store.get_transition(a.transition_id)
        return tr, self.store.list_actions(transition_id=a.transition_id)

    def _rechecked(
        self,
        releases: list[ActionRow],
        snap: Snapshot,
        fresh: Collection[str],
        got: dict[str, StepOutcome],
    ) -> list[ActionRow]:
        """The releases whose alias guard and plan preflight pass now (R-PASS-6/8), in one core
        session; those refused end terminal, an error is the step's owner's."""
        todo = [a for a in releases if a.transition_id not in fresh]
        known: dict[str, Refusals] = {}
        ends: dict[str, Verdict | Exception] = {}
        if todo:
            try:
                with core_session(self.core):
                    for a in todo:
                        v: Verdict | Exception | None
                        try:
                            v = alias_verdict(self.core, a)
                            if v is None and a.transition_id not in known:
                                plan = snap.plans.get(a.transition_id) or self._plan(a)
                                known[a.transition_id] = plan_refusals(
                                    self.core,
                                    plan,
                                    snap.reads if snap.recheck_reads else {},
                                    self.reservation_check,
                                )
                            v = v or recheck_verdict(a, known[a.transition_id])
                        except Exception as exc:  # retried on the release's clock
                            v = exc
                        if v is not None:
                            ends[a.id] = v
            except Exception as exc:  # the session itself failed
                ends = dict.fromkeys((a.id for a in todo), exc)
        for a in todo:
            end = ends.get(a.id)
            if isinstance(end, Exception):
                got[a.id] = self.owned(end, a.id, a)
            elif end is not None:
                got[a.id] = self._guarded(a, partial(self.endings.fail, a, end))
        return [a for a in releases if a.id not in ends]

    def _acquire_all(
        self,
        acquires: list[ActionRow],
        snap: Snapshot,
        got: dict[str, StepOutcome],
        *,
        submit: bool,
    ) -> None:
        """Preview in core sessions. Where previews of one session count each other's fits
        (``counts_fits``) the plain acquires share one session and one fence; otherwise — and
        for an endpoint, a reservation-bound or an unread deploy, whose preview does not count
        the session — a fit is trusted only as the first of its session and is submitted before
        the next preview. "Does not fit" is safe whatever the core counts: the waits share
        sessions and one write."""
        together = submit and counts_fits(self.core)
        plain = [a for a in acquires if together and plain_acquire(a, snap.reads)]
        queue = [a for a in acquires if a not in plain]
        waits: list[StepWrite] = []
        later: Later = []  # handled once a session is over
        while queue:
            fit: ActionRow | None = None
            now = self.clock.now()
            with core_session(self.core):
                while queue and fit is None:
                    a = queue.pop(0)
                    if self._capacity(a, now, snap, waits, later, got):
                        fit = a
            if fit is not None and submit:
                self._submit_all([fit], snap, got)
            elif fit is not None:
                got[fit.id] = self._outcome(fit, "ready")
        fits: list[ActionRow] = []
        if plain:
            now = self.clock.now()
            with core_session(self.core):
                fits = [a for a in plain if self._capacity(a, now, snap, waits, later, got)]
        if waits:
            self._guarded_all(
                waits, lambda: self.store.write_each(waits, now=self.clock.now()), got
            )
        for a, then in later:
            got[a.id] = self._guarded(a, then)
        self._submit_all(fits, snap, got)

    def _capacity(
        self,
        a: ActionRow,
        now: datetime,
        snap: Snapshot,
        waits: list[StepWrite],
        later: Later,
        got: dict[str, StepOutcome],
    ) -> bool:
        """Preview ``a``'s capacity and apply ``step_rules.capacity_call`` (R-PASS-9); True when
        it fits. A wait is collected in ``waits``; a timeout or an error goes to ``later``."""
        try:
            preview = endpoints.preview(self.core, a.deploy_id, max(a.delta_replicas or 1, 1))
        except Exception as exc:  # the step's owner decides
            later.append((a, partial(self.owned, exc, a.id, a)))
            return False
        deadline = wait_deadline(a, self.config)
        fits = not isinstance(preview, Insufficient)
        call = step_rules.capacity_call(fits=fits, now=now, deadline=deadline, state=a.state)
        if call == "fits" or not isinstance(preview, Insufficient):
            return True
        if call == "timeout":
            detail = {
                **(a.detail or {}),
                "free_by_node": dict(preview.free_by_node),
                "preview_reason": preview.reason,
            }
            extra = (
                f"waited until {deadline.isoformat()} for {a.delta_replicas} replica group(s) "
                f"of {a.deploy_id}"
            )
            ended = verdict(Phase.CAPACITY_UNAVAILABLE, extra=extra, detail=detail)
            later.append((a, partial(self.endings.fail, a, ended)))
            return False
        if call == "enter":
            waits.append(capacity_write(a, preview, deadline, snap.statuses[_key(a)]))
        phase = Phase.CAPACITY_WAIT.value
        got[a.id] = StepOutcome(a.id, a.deploy_id, StepState.CAPACITY_WAIT, phase, preview.reason)
        return False

    # -- write: fence, submit, record ------------------------------------------------

    def _resubmit(
        self, steps: list[ActionRow], snap: Snapshot, got: dict[str, StepOutcome]
    ) -> None:
        """Crash safety (R-PASS-10) under the same fence as a first submit (R-PASS-1, R-PASS-7)."""
        go: list[tuple[ActionRow, TargetStatusRow, bool]] = []
        items: list[tuple[ActionRow, TargetStatusRow, dict[str, Any]]]
        items = [(a, snap.statuses[_key(a)], {}) for a in steps]
        try:  # re-checked, not moved (the step is ``submitting`` already)
            fenced = self.store.fence_many(items, now=self.clock.now()) if steps else {}
        except Exception as exc:  # each step's owner decides
            got.update({a.id: self.owned(exc, a.id, a) for a in steps})
            return
        for a in steps:
            reason = fenced[a.id].reason
            outcome = step_rules.fence_outcome(reason)
            if outcome == "stay":  # resubmitted once the gate enforces
                got[a.id] = self._outcome(a, StepState.SUBMITTING, reason=reason)
            elif outcome == "superseded":
                got[a.id] = self._guarded(a, partial(self.superseded, a, reason))
            else:
                go.append((a, snap.statuses[_key(a)], True))
        self._call_all(go, got)

    def _submit_all(
        self, steps: list[ActionRow], snap: Snapshot, got: dict[str, StepOutcome]
    ) -> None:
        """Fence ``steps`` together (R-PASS-7), then submit and record those that passed."""
        if not steps:
            return
        now = self.clock.now()
        items = []
        for a in steps:
            phase = Phase.RELEASING if a.order == Order.RELEASE else Phase.ACQUIRING
            items.append(
                (a, snap.statuses[_key(a)], {"phase": phase.value, "reason": None, "fix": None})
            )
        try:
            fenced = self.store.fence_many(items, now=now)
        except Exception as exc:  # each step's owner decides
            got.update({a.id: self.owned(exc, a.id, a) for a in steps})
            return
        go: list[tuple[ActionRow, TargetStatusRow, bool]] = []
        for a in steps:
            result = fenced[a.id]
            outcome = step_rules.fence_outcome(None if result.ok else result.reason or "fenced_out")
            if outcome == "submit" and result.status is not None:
                go.append(
                    (replace(a, state=StepState.SUBMITTING, submitted_at=now), result.status, False)
                )
            elif outcome == "stay":
                got[a.id] = self._guarded(a, partial(self._stay, a, result.reason, now))
            else:
                got[a.id] = self._guarded(a, partial(self.superseded, a, result.reason))
        self._call_all(go, got)

    def _call_all(
        self, go: list[tuple[ActionRow, TargetStatusRow, bool]], got: dict[str, StepOutcome]
    ) -> None:
        """The core call of every fenced step (one ``Core.submit_many`` for the single-call
        ones), then one accepted write; a submit that raised is judged by ``submit_failed``."""
        if not go:
            return
        calls: dict[str, list[Any] | Exception] = {}
        single = [(a, s) for a, _, _ in go if (s := submission(a)) is not None]
        if single:
            try:
                results = self.core.submit_many([s for _, s in single])
            except Exception as exc:  # the adapter could not say: nothing of it is confirmed
                log.warning("batched submit of %d step(s) not confirmed: %s", len(single), exc)
                results = [exc] * len(single)
            for (a, _s), one in zip(single, results, strict=True):
                calls[a.id] = one if isinstance(one, Exception) else [one]
        for a, _status, _again in go:
            if a.id not in calls:  # more than one call (an endpoint's members, persist + start)
                try:
                    calls[a.id] = call_core(self.core, a)
                except Exception as exc:  # judged below
                    calls[a.id] = exc
        now = self.clock.now()
        writes = []
        for a, status, again in go:
            result = calls[a.id]
            if isinstance(result, Exception):
                got[a.id] = self.submit_failed(a, result)
            else:
                writes.append(accepted_write(a, result, status, self.config, now, again))
        if not writes:
            return
        try:
            moved = self.store.write_each(writes, now=now)
            # A step another pass recorded while its submit was in flight (it found the step
            # ``submitting`` and resubmitted it with the same key): the write moved nothing.
            # It is reported as it stands.
            rows = self.store.actions_by_id(
                [w.action_id for w in writes if w.action_id not in moved]
            )
        except Exception as exc:  # each step's owner decides
            got.update({a.id: self.owned(exc, a.id, a) for a, _, _ in go if a.id not in got})
            return
        for a, _status, _again in go:
            if a.id in moved:
                got[a.id] = self._outcome(a, StepState.ACCEPTED)
            elif a.id in rows:
                got[a.id] = self._outcome(rows[a.id], rows[a.id].state)

    def _stay(self, a: ActionRow, reason: str | None, now: datetime) -> StepOutcome:
        """The gate is off or another writer moved first: the checks passed, so a later failure
        starts a fresh clock; the step is asked again later."""
        if RETRY_SINCE in (a.detail or {}):
            detail = {k: v for k, v in (a.detail or {}).items() if k != RETRY_SINCE}
            self.store.update_action(a.id, expect=(a.state,), now=now, detail=detail)
        return self._outcome(a, a.state, reason=reason)

    def submit_failed(self, a: ActionRow, exc: Exception) -> StepOutcome:
        """What a submit that raised ``exc`` becomes (the step is ``submitting``)."""
        # the answer was lost: retried with the same key, on the submit's own clock
        if isinstance(exc, Transient):
            return self.owned(exc, a.id, a, event="submit_unconfirmed")
        if isinstance(exc, EtagMismatch):
            return self._guarded(a, partial(self._etag_conflict, a))
        if isinstance(exc, endpoints.PartialExecution):
            extra = f"members not done: {', '.join(exc.members)}"
            ended = verdict(
                Phase.PARTIAL_EXECUTION,
                "partial_execution",
                extra=extra,
                detail={"receipt": exc.receipt},
            )
            return self._guarded(a, partial(self.endings.fail, a, ended))
        return self.owned(exc, a.id, a)

    def call_core(self, a: ActionRow) -> list[Any]:
        """The core call(s) of step ``a`` with its idempotency key (raises what the core raises)."""
        return call_core(self.core, a)

    def _etag_conflict(self, a: ActionRow) -> StepOutcome:
        """The deploy changed since the snapshot: re-read it and decide again next time.

        Bounded by the step's own clock: a deploy that keeps changing under us past the
        stop (release) or readiness (acquire) timeout ends the step terminal, never a loop.
        """
        now = self.clock.now()
        release = a.order == Order.RELEASE
        limit = self.config.stop_timeout_s if release else self.config.readiness_timeout_s
        if (now - a.created_at).total_seconds() >= limit:
            phase = Phase.STOP_TIMEOUT if release else Phase.READINESS_TIMEOUT
            extra = (
                f"{a.deploy_id} kept changing under the engine (ETag conflicts) for {limit:.0f} s"
            )
            return self.endings.fail(a, verdict(phase, "etag_conflict", extra=extra))
        view = self.core.get_deploy(a.deploy_id)  # a read error: the owner's, on the submit's clock
        gone = replaced_verdict(a.planned.instance, view)
        if gone is not None:  # R-K8S-8: never retry a step on the object that replaced its own
            return self.endings.fail(a, gone)
        self.store.write_each([etag_write(a, view.etag)], now=now)
        return self._outcome(a, StepState.PENDING, reason="etag_conflict")

    def fail(self, a: ActionRow, v: Verdict) -> StepOutcome:
        return self.endings.fail(a, v)

    def superseded(self, a: ActionRow, reason: str | None) -> StepOutcome:
        """A fence refused the step for good (``fence_outcome``): the new plan decides again."""
        self.endings.finish(a, StepState.SUPERSEDED, reason or "fenced_out")
        return self._outcome(a, StepState.SUPERSEDED, reason=reason)

    def _guarded(self, a: ActionRow, then: Callable[[], StepOutcome]) -> StepOutcome:
        try:
            return then()
        except Exception as exc:
            return self.owned(exc, a.id, a)

    def _guarded_all(
        self, writes: list[StepWrite], then: Callable[[], object], got: dict[str, StepOutcome]
    ) -> None:
        try:
            then()
        except Exception as exc:  # each step's owner decides
            got.update({w.action_id: self.owned(exc, w.action_id, None) for w in writes})

    def owned(
        self, exc: Exception, action_id: str, seen: ActionRow | None, *, event: str = "step_retry"
    ) -> StepOutcome:
        """Apply ``judge``'s decision for ``exc`` raised by step ``action_id``; never raises."""
        return self.owner.owned(exc, action_id, seen, event=event)

    @staticmethod
    def _outcome(a: ActionRow, state: str, *, reason: str | None = None) -> StepOutcome:
        return StepOutcome(a.id, a.deploy_id, state, None, reason or a.reason, a.fix)


def _key(a: ActionRow) -> tuple[str, str]:
    return a.schedule, a.deploy_id
