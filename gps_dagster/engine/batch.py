"""Executing the steps of many schedules with shared round trips (decision "A batch of schedules shares its round trips.").

A boundary where a thousand schedules flip at once used to cost a dozen
transactions per step. Here the steps of one batch of schedules move together:

1. accepted steps are judged against the deploys the pass already read, and
   those that converged are written in one transaction;
2. the steps that may move are sorted out with one read of the batch's open
   plans and statuses; acquires are previewed in one core session (previews
   in a session count the groups found fitting before as taken);
3. one fence transaction moves them all to ``submitting``; one ``Core.submit_many``
   call submits them (each its own idempotency key; the adapter shares the work: the
   simulator's transactions, bounded concurrency on Kubernetes; what it returns is
   durable); one transaction records them accepted (each a CAS on the status its fence
   left); a step left ``submitting`` is resubmitted with the same key;
4. acquires released by those submissions go in a second round.

Per-step rules are those of ``steps.StepRunner``, which still handles every
step off the common path one at a time: a resubmission, a superseded or
stale step, a cancellation behind a failed step, a release of a plan not
preflighted in this batch (its alias and preflight re-checks), an endpoint
or reservation-bound acquire, and every error. Correctness rests where it did:
the fence, the status CAS and the idempotency keys.
"""
# Decisions embodied here (docs/decisions.md):
# * “Preflight is re-checked right before a release”
# * “A batch of schedules shares its round trips”
# * “Acquires previewed together only where previews count each other”

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime

from gps_dagster.domain import step_rules
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import StepKind
from gps_dagster.engine import endpoints
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.convergence import Observer
from gps_dagster.engine.endings import first_order
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.step_writes import accepted_write, capacity_write, wait_deadline
from gps_dagster.engine.steps import StepRunner
from gps_dagster.engine.store_ports import StepStore
from gps_dagster.ports import (
    BatchingCore,
    Clock,
    DeployView,
    Insufficient,
    OperationKind,
    StepCore,
    Submission,
)
from gps_dagster.store.plans import StepWrite
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow

log = logging.getLogger(__name__)

MOVABLE = ("pending", "capacity_wait")


def counts_fits(core: object) -> bool:
    """Whether previews inside one core session count earlier fits as taken (then a batch
    of acquires may be previewed together and submitted together)."""
    return isinstance(core, BatchingCore) and core.previews_count_fits()


@contextlib.contextmanager
def core_session(core: object) -> Iterator[None]:
    """The core's batch session when it has one (``BatchingCore``), else nothing."""
    if isinstance(core, BatchingCore):
        with core.batch():
            yield
    else:
        yield


class BatchRunner:
    """The steps of a batch of schedules, moved together where the rules allow."""

    def __init__(
        self,
        store: StepStore,
        core: StepCore,
        clock: Clock,
        config: EngineConfig,
        runner: StepRunner,
        observer: Observer,
    ) -> None:
        self.store, self.core, self.clock, self.config = store, core, clock, config
        self.runner, self.observer = runner, observer

    # -- accepted steps ------------------------------------------------------------

    def observe(
        self, accepted: list[ActionRow], reads: Mapping[str, DeployView]
    ) -> list[StepOutcome]:
        """Judge accepted steps against ``reads``; converged ones are written together."""
        out: list[StepOutcome] = []
        done: list[tuple[ActionRow, DeployView]] = []
        now = self.clock.now()
        for a in accepted:
            deploy = reads.get(a.deploy_id)
            if deploy is None or (a.detail or {}).get("endpoint"):
                out.append(self.observer.observe_action(a))
                continue
            try:
                converged, failure = self.observer.judge(a, deploy, now)
            except Exception as exc:  # the step's owner decides
                out.append(self.runner.owned(exc, a.id, a))
                continue
            if failure is not None:
                out.append(self.runner.fail(a, failure))
            elif converged:
                done.append((a, deploy))
            else:
                out.append(StepOutcome(a.id, a.deploy_id, "accepted"))
        if done:
            writes = [self.runner.endings.convergence(a, deploy, now) for a, deploy in done]
            moved = self.store.write_each(writes, now=now)
            for a, deploy in done:
                if a.id in moved:
                    self.observer.converged(a, deploy)
            out += [
                StepOutcome(a.id, a.deploy_id, "converged", Phase.CONVERGED.value)
                if a.id in moved
                else StepOutcome(a.id, a.deploy_id, "accepted")
                for a, _ in done
            ]
        return out

    # -- steps that may move -----------------------------------------------------

    def run(
        self, schedules: list[str], fresh: set[str], reads: Mapping[str, DeployView]
    ) -> list[StepOutcome]:
        """Advance every movable step of ``schedules``' open plans, in plan order.

        ``fresh``: plans opened in this batch, preflighted moments ago in the same core
        session — their releases need no second alias and preflight read.
        """
        out: list[StepOutcome] = []
        done: set[str] = set()
        moved = 0
        for _round in range(2):  # releases, then the acquires their submissions unlock
            plans = self.store.open_plans(schedules)
            if not plans:
                return out
            moved = self._round(plans, fresh, reads, done, out)
            if not moved:
                break
        if done:  # what was just submitted may be done already (a core with no delay)
            out += self._observe_open(schedules)
        return out

    def _observe_open(self, schedules: list[str]) -> list[StepOutcome]:
        """Judge the open plans' accepted steps on one fresh read of their deploys."""
        accepted = [
            a
            for _tr, steps in self.store.open_plans(schedules)
            for a in steps
            if a.state == "accepted"
        ]
        if not accepted:
            return []
        try:
            fresh = dict(self.core.get_deploys(sorted({a.deploy_id for a in accepted})))
        except Exception as exc:  # each step is then read on its own, errors owned per step
            log.warning("batched deploy read failed (%s); observing steps one by one", exc)
            fresh = {}
        return self.observe(accepted, fresh)

    def _round(
        self,
        plans: list[tuple[TransitionRow, list[ActionRow]]],
        fresh: set[str],
        reads: Mapping[str, DeployView],
        done: set[str],
        out: list[StepOutcome],
    ) -> int:
        names = sorted({tr.schedule for tr, _ in plans})
        statuses = self.store.statuses_for(names)
        versions = self.store.schedule_states(names)
        releases: list[ActionRow] = []
        acquires: list[ActionRow] = []
        for tr, steps in plans:
            first = first_order(tr.order)
            before = [x for x in steps if x.order == first]
            for a in sorted(steps, key=lambda x: x.seq):
                if a.id in done or a.state not in (*MOVABLE, "submitting"):
                    continue
                lane = self._lane(a, tr, first, before, statuses, versions, fresh, reads)
                if lane == "wait":
                    continue
                done.add(a.id)
                if lane == "one":
                    out.append(self.runner.execute(a.id))
                elif lane == "release":
                    releases.append(a)
                else:
                    acquires.append(a)
        if not counts_fits(self.core):  # each fit submitted before the next preview
            moved = self._submit_all(releases, statuses, out)
            return moved + self._acquire_all(acquires, statuses, out)
        ready = releases + self._previewed(acquires, statuses, out)
        return self._submit_all(ready, statuses, out)

    def _lane(
        self,
        a: ActionRow,
        tr: TransitionRow,
        first: str,
        before: list[ActionRow],
        statuses: Mapping[tuple[str, str], TargetStatusRow],
        versions: Mapping[str, tuple[int, bool]],
        fresh: set[str],
        reads: Mapping[str, DeployView],
    ) -> str:
        """``release`` / ``acquire``: batched; ``one``: the step runner alone; ``wait``."""
        status = statuses.get((a.schedule, a.deploy_id))
        if a.state == "submitting" or status is None or status.transition_id != a.transition_id:
            return "one"
        if versions.get(a.schedule) != (a.schedule_version, True):
            return "one"  # stale: superseded by the runner
        move = step_rules.may_move(a.order, first, [x.state for x in before])
        if move.verdict == "broken":
            return "one"  # cancelled behind the failed step, by the step runner
        if move.verdict == "wait":
            return "wait"
        if a.order == "release":
            return "release" if tr.id in fresh else "one"
        deploy = reads.get(a.deploy_id)
        if deploy is None or deploy.reservation is not None or (a.detail or {}).get("endpoint"):
            return "one"
        return "acquire"

    def _acquire_all(
        self,
        acquires: list[ActionRow],
        statuses: Mapping[tuple[str, str], TargetStatusRow],
        out: list[StepOutcome],
    ) -> int:
        """Preview in core sessions; each fit is submitted before the next preview.

        A fit is trusted only as the first of its session: not every core's session counts
        earlier fits as taken (a sim on SQLite or with faults declared, a core without
        sessions), and a preview that already saw a start submitted needs no such count.
        "Does not fit" is safe whatever the core counts, so the waits share sessions and
        one write (the common case right after a storm's stops: their GPUs are not free yet).
        """
        queue = list(acquires)
        moved = 0
        waits: list[StepWrite] = []
        later: list[tuple[ActionRow, Exception | None]] = []  # handled once a session is over
        while queue:
            fit: ActionRow | None = None
            now = self.clock.now()
            with core_session(self.core):
                while queue and fit is None:
                    a = queue.pop(0)
                    if self._capacity(a, now, statuses, waits, later, out):
                        fit = a
            if fit is not None:
                moved += self._submit_all([fit], statuses, out)
        self._waited(waits, later, out)
        return moved

    def _previewed(
        self,
        acquires: list[ActionRow],
        statuses: Mapping[tuple[str, str], TargetStatusRow],
        out: list[StepOutcome],
    ) -> list[ActionRow]:
        """The acquires whose capacity fits now (one core session); the others wait (or time
        out)."""
        if not acquires:
            return []
        waits: list[StepWrite] = []
        later: list[tuple[ActionRow, Exception | None]] = []  # handled once the session is over
        now = self.clock.now()
        with core_session(self.core):
            fits = [a for a in acquires if self._capacity(a, now, statuses, waits, later, out)]
        self._waited(waits, later, out)
        return fits

    def _capacity(
        self,
        a: ActionRow,
        now: datetime,
        statuses: Mapping[tuple[str, str], TargetStatusRow],
        waits: list[StepWrite],
        later: list[tuple[ActionRow, Exception | None]],
        out: list[StepOutcome],
    ) -> bool:
        """Preview ``a``'s capacity and apply ``step_rules.capacity_call``; True when it fits.

        A wait is collected in ``waits`` (written together); a timeout or an error goes to
        ``later`` (the step runner ends it, or its owner judges the error)."""
        try:
            preview = endpoints.preview(self.core, a.deploy_id, max(a.delta_replicas or 1, 1))
        except Exception as exc:  # the step's owner decides
            later.append((a, exc))
            return False
        deadline = wait_deadline(a, self.config)
        call = step_rules.capacity_call(
            fits=not isinstance(preview, Insufficient), now=now, deadline=deadline, state=a.state
        )
        if call == "fits" or not isinstance(preview, Insufficient):
            return True
        if call == "timeout":
            later.append((a, None))  # the runner ends it capacity_unavailable
            return False
        if call == "enter":
            waits.append(capacity_write(a, preview, deadline, statuses[(a.schedule, a.deploy_id)]))
        out.append(
            StepOutcome(
                a.id, a.deploy_id, "capacity_wait", Phase.CAPACITY_WAIT.value, preview.reason
            )
        )
        return False

    def _waited(
        self,
        waits: list[StepWrite],
        later: list[tuple[ActionRow, Exception | None]],
        out: list[StepOutcome],
    ) -> None:
        """Write the collected waits together, then let the runner decide the others."""
        if waits:
            self.store.write_each(waits, now=self.clock.now())
        for a, error in later:
            out.append(self.runner.owned(error, a.id, a) if error else self.runner.execute(a.id))

    def _submit_all(
        self,
        steps: list[ActionRow],
        statuses: Mapping[tuple[str, str], TargetStatusRow],
        out: list[StepOutcome],
    ) -> int:
        """Fence, submit and record ``steps``; returns how many the core accepted."""
        if not steps:
            return 0
        now = self.clock.now()
        items = []
        for a in steps:
            phase = Phase.RELEASING if a.order == "release" else Phase.ACQUIRING
            changes = {"phase": phase.value, "reason": None, "fix": None}
            items.append((a, statuses[(a.schedule, a.deploy_id)], changes))
        fenced = self.store.fence_many(items, now=now)
        go: list[tuple[ActionRow, TargetStatusRow]] = []
        for a in steps:
            result = fenced[a.id]
            outcome = step_rules.fence_outcome(None if result.ok else result.reason or "fenced_out")
            if outcome == "submit" and result.status is not None:
                go.append((replace(a, state="submitting", submitted_at=now), result.status))
            elif outcome == "stay":
                out.append(StepOutcome(a.id, a.deploy_id, a.state, None, result.reason))
            else:
                out.append(self.runner.superseded(a, result.reason))
        return self._call_all(go, out)

    # -- the batch's one core call (``Core.submit_many``) -------------------------------------

    def _call_all(self, go: list[tuple[ActionRow, TargetStatusRow]], out: list[StepOutcome]) -> int:
        calls: dict[str, list[object] | Exception] = {}
        single = [(a, s) for a, _ in go if (s := submission(a)) is not None]
        if single:
            try:
                results = self.core.submit_many([s for _, s in single])
            except Exception as exc:  # the adapter could not say: nothing of it is confirmed
                log.warning("batched submit of %d step(s) not confirmed: %s", len(single), exc)
                results = [exc] * len(single)
            for (a, _s), got in zip(single, results, strict=True):
                calls[a.id] = got if isinstance(got, Exception) else [got]
        for a, _status in go:  # the steps of more than one call (endpoints, persist + start)
            if a.id not in calls:
                try:
                    calls[a.id] = self.runner.call_core(a)
                except Exception as exc:  # judged below
                    calls[a.id] = exc
        now = self.clock.now()
        writes = []
        for a, status in go:
            result = calls[a.id]
            if isinstance(result, Exception):
                out.append(self.runner.submit_failed(a, result))
            else:
                writes.append(accepted_write(a, list(result), status, self.config, now, False))
        moved = self.store.write_each(writes, now=now) if writes else {}
        out += [StepOutcome(a.id, a.deploy_id, "accepted") for a, _ in go if a.id in moved]
        return len(moved)


def submission(a: ActionRow) -> Submission | None:
    """Step ``a`` as one port mutation, or None when it is more than one call (an endpoint's
    members, a persist-then-start: ``StepRunner.call_core`` makes those)."""
    detail = a.detail or {}
    if detail.get("endpoint"):
        return None
    etag, key = a.etag_used or "", a.idempotency_key
    if a.step == StepKind.STOP.value:
        allow = bool(detail.get("allow_downtime"))
        return Submission(OperationKind.STOP, a.deploy_id, etag, key, allow_aliased_downtime=allow)
    if a.step in (StepKind.SCALE_DOWN.value, StepKind.SCALE_UP.value):
        if a.replicas is None:
            return None  # the runner's own call reports it
        kind = OperationKind.SET_REPLICA_INTENT
        return Submission(kind, a.deploy_id, etag, key, replicas=a.replicas)
    if detail.get("persist_replicas") and a.replicas is not None:
        return None
    return Submission(OperationKind.START, a.deploy_id, etag, key)
