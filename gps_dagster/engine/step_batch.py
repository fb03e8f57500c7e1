"""Executing a given list of steps together: a Dagster batch op's steps (decision "`Engine.execute_steps` batches only the common path").

``BatchRunner.run`` moves every movable step of a batch of schedules, but takes the batched
lane for a release only when its plan was preflighted in the same pass. A storm's
``gps_transition_batch`` run executes plans opened by an earlier tick, so each of its op's
steps went through ``StepRunner.execute`` one at a time (a dozen round trips a step).

``StepBatch.execute`` moves exactly the steps it is given (never another step of their
plans) on shared round trips:

1. one read of the steps, their open plans, statuses and schedule versions;
2. one ``core.get_deploys`` for the acquires and for the steps the releases' re-checks
   preflight; the release-time re-checks (alias guard of a stop, preflight of the plan's
   acquiring steps, R-PASS-6/8) run in one core session with the rules of
   ``StepRunner._fence_and_submit`` — except for the releases of ``fresh`` plans, which the
   caller's own pass opened and preflighted moments ago (a pre-armed run at its boundary):
   like the releases of plans opened in the same pass (``BatchRunner.run``), they are not read
   again;
3. the releases cleared: the fence, the core sessions of ``SUBMIT_SESSION`` calls and the
   accepted write that ``BatchRunner`` uses; acquires: previews in core sessions, each fit
   submitted before the next preview (``_acquire_all``), the waits written together.

Only the common path is batched. A release whose re-check does not pass cleanly (an alias
without consent, an unreadable guard, a refusal, a deploy not read) and every step off the
path (``BatchRunner._lane``'s "one") goes to ``StepRunner.execute``, which re-reads and
decides it as it always has: the outcome of an unusual step is the lone runner's by
construction.
"""
# Decisions embodied here (docs/decisions.md):
# * “Preflight is re-checked right before a release”
# * “`Engine.execute_steps` batches only the common path”
# * “Acquires previewed together only where previews count each other”
# * “A pre-armed run's releases are not re-checked after its own pass”

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from gps_dagster.domain import step_rules
from gps_dagster.domain.planner import PlannedStep, StepKind, Wanted
from gps_dagster.engine.batch import MOVABLE, BatchRunner, core_session, counts_fits
from gps_dagster.engine.endings import first_order
from gps_dagster.engine.preflight import preflight
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.steps import planned_step
from gps_dagster.ports import DeployView
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow

log = logging.getLogger(__name__)

Plan = tuple[TransitionRow, list[ActionRow]]


class StepBatch(BatchRunner):
    """Given steps of one order (a batch op's releases, or its acquires), moved together."""

    def execute(
        self, step_ids: Sequence[str], *, fresh: set[str] | None = None
    ) -> list[StepOutcome]:
        """The outcome of each of ``step_ids``, in that order; never raises for a step.

        ``fresh``: plans the caller's own pass opened and preflighted moments ago; their
        releases are not re-checked (no second deploy, alias and preflight read)."""
        ids = list(dict.fromkeys(step_ids))
        got: dict[str, StepOutcome] = {}
        waiting = self._move(ids, got, last=False, fresh=fresh or set())
        if waiting:  # behind a step of this call that just moved (releases and acquires mixed)
            self._move(waiting, got, last=True, fresh=fresh or set())
        # A step another pass recorded while its submit was in flight (it found the step
        # ``submitting`` and resubmitted it with the same key): the accepted write moved nothing.
        # The lone runner re-reads it and reports it as it stands.
        self._alone([i for i in ids if i not in got], got)
        return [got[i] for i in step_ids]

    def _move(
        self, ids: list[str], got: dict[str, StepOutcome], *, last: bool, fresh: set[str]
    ) -> list[str]:
        """Move ``ids``; returns those waiting on a prerequisite (run alone when ``last``)."""
        try:
            rows = self.store.actions_by_id(ids)
            names = sorted({a.schedule for a in rows.values()})
            plans = {tr.id: (tr, steps) for tr, steps in self.store.open_plans(names)}
            statuses = self.store.statuses_for(names)
            versions = self.store.schedule_states(names)
        except Exception as exc:  # each step then reads (and owns its errors) on its own
            log.warning("batched read of %d step(s) failed (%s); one by one", len(ids), exc)
            self._alone(ids, got)
            return []
        steps = [rows[i] for i in ids if i in rows]
        reads = self._deploys(steps, plans, fresh)
        releases, acquires, waiting = [], [], []
        for i in ids:
            lane = self._lane_of(rows.get(i), plans, statuses, versions, reads)
            if lane == "release":
                releases.append(rows[i])
            elif lane == "acquire":
                acquires.append(rows[i])
            elif lane == "wait" and not last:
                waiting.append(i)
            else:
                self._alone([i], got)
        cleared = {a.id for a in releases if a.transition_id in fresh}
        cleared |= self._rechecked([a for a in releases if a.id not in cleared], plans, reads)
        self._alone([a.id for a in releases if a.id not in cleared], got)
        out: list[StepOutcome] = []
        self._submit_all([a for a in releases if a.id in cleared], statuses, out)
        if counts_fits(self.core):  # previews of one session count each other's fits
            self._submit_all(self._previewed(acquires, statuses, out), statuses, out)
        else:
            self._acquire_all(acquires, statuses, out)
        got.update({o.step_id: o for o in out})
        return waiting

    def _alone(self, ids: list[str], got: dict[str, StepOutcome]) -> None:
        for i in ids:
            got[i] = self.runner.execute(i)

    def _lane_of(
        self,
        a: ActionRow | None,
        plans: Mapping[str, Plan],
        statuses: Mapping[tuple[str, str], TargetStatusRow],
        versions: Mapping[str, tuple[int, bool]],
        reads: Mapping[str, DeployView],
    ) -> str:
        plan = plans.get(a.transition_id) if a is not None else None
        if a is None or plan is None or a.state not in MOVABLE:
            return "one"  # unknown, finished, accepted, submitting, or its plan closed
        tr, steps = plan
        first = first_order(tr.order)
        before = [x for x in steps if x.order == first]
        # every plan counts as preflighted here: the releases' re-checks are done below
        return self._lane(a, tr, first, before, statuses, versions, {tr.id}, reads)

    def _deploys(
        self, steps: list[ActionRow], plans: Mapping[str, Plan], fresh: set[str]
    ) -> dict[str, DeployView]:
        """One read of the acquires' deploys and of every deploy the releases' re-checks need
        (none for the releases of ``fresh`` plans)."""
        wanted = {a.deploy_id for a in steps if a.order == "acquire"}
        for tid in {a.transition_id for a in steps if a.order == "release"} - fresh:
            _tr, plan_steps = plans.get(tid, (None, []))
            wanted.update(x.deploy_id for x in plan_steps if x.state in MOVABLE)
        if not wanted:
            return {}
        try:
            return dict(self.core.get_deploys(sorted(wanted)))
        except Exception as exc:  # each step then reads (and owns its errors) on its own
            log.warning("batched deploy read failed (%s); those steps run one by one", exc)
            return {}

    # -- acquires -------------------------------------------------------------------

    # -- the release-time re-checks (``StepRunner._fence_and_submit``) ----------------

    def _rechecked(
        self, releases: list[ActionRow], plans: Mapping[str, Plan], reads: Mapping[str, DeployView]
    ) -> set[str]:
        """The releases whose alias guard and plan preflight pass cleanly now."""
        if not releases:
            return set()
        cleared: set[str] = set()
        refusals: dict[str, tuple[set[str], Mapping[str, object]] | None] = {}
        try:
            with core_session(self.core):
                for a in releases:
                    if a.transition_id not in refusals:
                        refusals[a.transition_id] = self._refusals(plans[a.transition_id], reads)
                    known = refusals[a.transition_id]
                    if known is None:
                        continue  # the lone runner reads and decides it
                    culprit = step_rules.recheck_culprit(a.deploy_id, *known)
                    if culprit is None and self._alias_clear(a):
                        cleared.add(a.id)
        except Exception as exc:  # the session itself failed: each release checks alone
            log.warning("batched release re-check failed (%s); one by one", exc)
            return set()
        return cleared

    def _alias_clear(self, a: ActionRow) -> bool:
        """No alias guard in the way of this stop (anything else: the lone runner decides)."""
        if a.step != StepKind.STOP.value:
            return True
        if (a.detail or {}).get("endpoint"):
            return False
        try:
            info = self.core.alias_guard(a.deploy_id)
        except Exception:  # blocked, retried or refused: the lone runner's verdict
            return False
        return not info.has_alias or bool((a.detail or {}).get("allow_downtime"))

    def _refusals(
        self, plan: Plan, reads: Mapping[str, DeployView]
    ) -> tuple[set[str], Mapping[str, object]] | None:
        """The plan's unsubmitted acquires and preflight's refusals of its steps, as
        ``StepRunner._recheck_preflight`` reads them (None: the lone runner must read it)."""
        tr, steps = plan
        actions = [x for x in steps if x.state in MOVABLE]
        acquiring = {x.deploy_id for x in actions if x.order == "acquire"}
        if not acquiring:
            return acquiring, {}
        if any(x.deploy_id not in reads for x in actions):
            return None  # gone, an endpoint or unread: the lone runner reads it itself
        planned: dict[str, tuple[PlannedStep, Wanted, DeployView]] = {
            x.deploy_id: planned_step(x, reads[x.deploy_id]) for x in actions
        }
        try:
            refusals = preflight(
                self.core,
                planned,
                self.runner.reservation_check,
                release_first=first_order(tr.order) == "release",
            )
        except Exception:  # a transient read: the lone runner owns it
            return None
        return acquiring, refusals
