"""What the Dagster layer asks the engine, beyond a pass: intent-level calls (a step executed
or previewed, the plans near their boundary, whether a plan still stands, the due index) that
the sensors and ops translate, so no decision is taken in ``dagster_defs``. A mixin of
``Engine`` (``engine/engine.py``), over the same store, clock, config and step runner."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_state import StepState
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.prearm import NearBoundary, boundaries_within
from gps_dagster.engine.reports import PlanRef, StepOutcome, StepRef
from gps_dagster.engine.standing import Standing, plan_standing, step_standing
from gps_dagster.engine.steps import StepRunner
from gps_dagster.engine.store_ports import EngineStore
from gps_dagster.ports import Clock
from gps_dagster.store.records import ActionRow, TransitionRow
from gps_dagster.store.retention import Pruned
from gps_dagster.store.shapes import NewPlan, NewStep


class DagsterSurface:
    """The Dagster-facing calls of ``Engine``."""

    store: EngineStore
    clock: Clock
    config: EngineConfig
    runner: StepRunner

    def hasten(self, deploy_ids: Sequence[str]) -> list[str]:
        """Watch events concern these deploys: the schedules whose steps wait on them are due now
        (``store.hasten``); returns them (none: nothing here waits on those deploys)."""
        return self.store.hasten(deploy_ids, now=self.clock.now())

    def next_due(self, now: datetime) -> datetime | None:
        """The earliest instant any schedule needs a pass (by index; for sensors and sleeps)."""
        return self.store.next_due(now)

    def prune(self, now: datetime, *, days: float | None = None) -> Pruned:
        """Delete finished history older than the retention (never a row in flight)."""
        keep = self.config.retention_days if days is None else days
        return self.store.prune(before=now - timedelta(days=keep))

    def due_schedules(self, now: datetime, limit: int = 1000) -> list[str]:
        """Names of the schedules due at ``now`` that no replica is serving (by index)."""
        return self.store.due_names(now, limit)

    def upcoming_due(self, now: datetime, limit: int = 5) -> list[tuple[datetime, str]]:
        """(instant, schedule) of the next ``limit`` passes due after ``now`` (by index; the
        UI's "next boundaries": a boundary, or a follow-up while steps are in flight)."""
        return self.store.upcoming_due(now, limit)

    def execute_step(self, step_id: str) -> StepOutcome:
        """Advance one step now (a Dagster op); never blocks."""
        return self.runner.execute(step_id)

    def preview_step(self, step_id: str) -> StepOutcome:
        """What ``execute_step`` would do with this step now, nothing submitted nor written
        (``ready`` when it would move; the Dagster layer's ``Intents`` ask it)."""
        return self.runner.execute(step_id, submit=False)

    def execute_steps(
        self, step_ids: Sequence[str], *, fresh: Collection[str] = ()
    ) -> list[StepOutcome]:
        """Advance these steps now, together (a Dagster batch op; ``engine/steps.py``):
        the outcome of each, in order, as ``execute_step`` would decide it; never blocks.

        ``fresh``: transitions the caller's own pass opened, and so preflighted, moments ago
        (a pre-armed run at its boundary): their releases skip the second alias and preflight
        read, as the releases of plans opened in the same pass do (``StepRunner.run``)."""
        return self.runner.execute_many(step_ids, fresh=set(fresh))

    def boundaries_within(self, now: datetime, lead_s: float) -> list[NearBoundary]:
        """Release-first schedules whose next intent boundary is within ``lead_s`` of ``now``
        (``engine/prearm.py``): the runs the Dagster layer launches ahead of their boundary."""
        return boundaries_within(self.store, now, lead_s)

    def plan_standing(self, transition_id: str) -> Standing:
        """Whether this plan is still the one its targets follow (``engine/standing.py``): what
        a run checks first, so a re-execution of a replaced plan ends with the reason."""
        return plan_standing(self.store, transition_id)

    def step_standing(self, step_id: str) -> Standing:
        """Why a step no longer stands (the plan that superseded it, an edit, a delete)."""
        action = self.store.get_action(step_id)
        if action is None:
            return Standing("", False, "unknown_step", f"step {step_id} is not in the store")
        return step_standing(self.store, action)

    def capacity_waits(self) -> list[StepRef]:
        """Re-preview every waiting step: return those that fit now, time out the rest."""
        ready: list[StepRef] = []
        for a in self.store.list_actions(states=(StepState.CAPACITY_WAIT,)):
            if self.runner.execute(a.id, submit=False).state == "ready":
                ready.append(StepRef(a.id, a.deploy_id, a.step, a.order))
        return ready

    def pending_steps(self, transition_id: str) -> PlanRef:
        """The plan as the Dagster transition job receives it."""
        tr = self.store.get_transition(transition_id)
        if tr is None:
            raise KeyError(transition_id)
        return plan_ref(tr, self.store.list_actions(transition_id=transition_id))


def plan_ref(transition: TransitionRow | NewPlan, steps: Sequence[ActionRow | NewStep]) -> PlanRef:
    """The plan as the Dagster transition job receives it: from its rows as read, or from the
    records of a plan just opened (no read)."""
    refs = [StepRef(a.id, a.deploy_id, a.step, a.order) for a in sorted(steps, key=lambda x: x.seq)]
    return PlanRef(
        transition_id=transition.id,
        schedule=transition.schedule,
        schedule_version=transition.schedule_version,
        interval_start=transition.boundary_at,
        targets=tuple(transition.targets),
        release_steps=tuple(r for r in refs if r.order == Order.RELEASE),
        acquire_steps=tuple(r for r in refs if r.order == Order.ACQUIRE),
        trigger=transition.trigger,
        order=transition.order,
    )
