"""Observing accepted steps until they converge or their clock runs out.

Convergence is read from the deploy, never assumed from the operation:
a stop converges when the deploy is STOPPED *and* no pod is terminating (the
evidence its GPUs are free, R-PASS-8); a scale-down when the applied
generation is current, desired = ready = n and nothing terminates (R-SCALE-4);
an acquire when READY with the applied generation current and enough ready
replica groups (R-PASS-9), plus the placement witness when the deploy is
bound to a reservation (R-GPS-7). Each has a deadline that ends in a terminal
phase, also while the core cannot be read (the step's owner, ``failures``);
nothing is stopped or restarted automatically (L3). Converging writes the
step, the status and the plan's closing in one transaction (R-PASS-16).
"""

# Decisions embodied here (docs/decisions.md):
# * “Unschedulable is not instant”
# * “Cluster-autoscaler events steer the unschedulable grace”
# * “The unschedulable grace is the schedule's”

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import StepKind
from gps_dagster.domain.step_plan import UNSCHEDULABLE_SINCE
from gps_dagster.domain.step_state import StepState
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.eligibility import replaced_verdict
from gps_dagster.engine.endpoints import read_target
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.steps import StepRunner
from gps_dagster.engine.store_ports import PlanStore
from gps_dagster.ports import Clock, DeployReads, DeployState, DeployView
from gps_dagster.store.records import ActionRow

log = logging.getLogger(__name__)

Witness = Callable[[DeployView], Verdict | bool | None]
"""Placement witness: True = confirmed, None = not yet known, a Verdict = mismatch."""
AfterConverged = Callable[[ActionRow, DeployView], None]
"""Runs once per step, by the pass whose store write converged it (the fence): the place for a
clean-up the converge makes due (the GPS holder pod), never a read. It must not raise."""


def stop_converged(deploy: DeployView) -> bool:
    return deploy.converged_stopped


def scale_down_converged(deploy: DeployView, replicas: int) -> bool:
    return (
        deploy.applied_generation >= deploy.generation
        and deploy.desired_replicas == replicas
        and deploy.ready_replicas == replicas
        and deploy.terminating_pods == 0
    )


def acquire_ready(deploy: DeployView, replicas: int) -> bool:
    return (
        deploy.state is DeployState.READY
        and deploy.applied_generation >= deploy.generation
        and deploy.ready_replicas >= replicas
    )


def unschedulable_grace_s(a: ActionRow, config: EngineConfig) -> float:
    """How long step ``a``'s pods may stay unschedulable: its pool's setting (the schedule's
    ``unschedulable_grace_s``, recorded on the step when its plan opened), else the engine's."""
    own = a.planned.unschedulable_grace_s
    return own if own is not None else config.unschedulable_grace_s


class Observer:
    def __init__(
        self,
        store: PlanStore,
        core: DeployReads,
        clock: Clock,
        config: EngineConfig,
        runner: StepRunner,
        witness: Witness | None = None,
        after_converged: AfterConverged | None = None,
    ) -> None:
        self.store, self.core, self.clock, self.config = store, core, clock, config
        self.runner, self.witness = runner, witness
        self.after_converged = after_converged

    def converged(self, a: ActionRow, deploy: DeployView) -> None:
        """Step ``a`` was just converged by this pass's store write."""
        if self.after_converged is not None:
            self.after_converged(a, deploy)

    def observe_many(
        self, accepted: list[ActionRow], reads: Mapping[str, DeployView]
    ) -> list[StepOutcome]:
        """Judge accepted steps against ``reads`` (a step not in them: read on its own); the
        converged ones are written together (``Store.write_each``)."""
        out: list[StepOutcome] = []
        done: list[tuple[ActionRow, DeployView]] = []
        now = self.clock.now()
        for a in accepted:
            deploy = reads.get(a.deploy_id)
            if deploy is None or a.planned.endpoint:
                out.append(self.observe_action(a))
                continue
            try:
                converged, failure = self._judge(a, deploy, now)
            except Exception as exc:  # the step's owner decides
                out.append(self.runner.owned(exc, a.id, a))
                continue
            if failure is not None:
                out.append(self.runner.fail(a, failure))
            elif converged:
                done.append((a, deploy))
            else:
                out.append(StepOutcome(a.id, a.deploy_id, StepState.ACCEPTED))
        if done:
            writes = [self.runner.endings.convergence(a, deploy, now) for a, deploy in done]
            moved = self.store.write_each(writes, now=now)
            for a, deploy in done:
                if a.id in moved:
                    self.converged(a, deploy)
            out += [
                StepOutcome(a.id, a.deploy_id, StepState.CONVERGED, Phase.CONVERGED.value)
                if a.id in moved
                else StepOutcome(a.id, a.deploy_id, StepState.ACCEPTED)
                for a, _ in done
            ]
        return out

    def observe_open(self, schedules: list[str]) -> list[StepOutcome]:
        """Judge the open plans' accepted steps on one fresh read of their deploys (what a pass
        just submitted may be done already: a core with no delay)."""
        accepted = [
            a
            for _tr, steps in self.store.open_plans(schedules)
            for a in steps
            if a.state == StepState.ACCEPTED
        ]
        if not accepted:
            return []
        try:
            fresh = dict(self.core.get_deploys(sorted({a.deploy_id for a in accepted})))
        except Exception as exc:  # each step is then read on its own, errors owned per step
            log.warning("batched deploy read failed (%s); observing steps one by one", exc)
            fresh = {}
        return self.observe_many(accepted, fresh)

    def observe_action(self, a: ActionRow) -> StepOutcome:
        """Judge an accepted step against the deploy now; never raises (R-PASS-15)."""
        try:
            return self._observe(a)
        except Exception as exc:  # unreadable core, store, anything: the step's owner decides
            return self.runner.owned(exc, a.id, a)

    def _observe(self, a: ActionRow) -> StepOutcome:
        now = self.clock.now()
        deploy = read_target(self.core, a.deploy_id)[0]
        done, failure = self._judge(a, deploy, now)
        if failure is not None:
            return self.runner.fail(a, failure)
        if not done:
            return StepOutcome(a.id, a.deploy_id, StepState.ACCEPTED)
        if self.runner.endings.converge(a, deploy):
            self.converged(a, deploy)
        return StepOutcome(a.id, a.deploy_id, StepState.CONVERGED, Phase.CONVERGED.value)

    def judge(self, a: ActionRow, deploy: DeployView, now: datetime) -> tuple[bool, Verdict | None]:
        """(converged, terminal verdict) of accepted step ``a`` on ``deploy`` at ``now``."""
        return self._judge(a, deploy, now)

    def _judge(
        self, a: ActionRow, deploy: DeployView, now: datetime
    ) -> tuple[bool, Verdict | None]:
        gone = replaced_verdict(a.planned.instance, deploy)
        if gone is not None:  # R-K8S-8: the replacement's state says nothing about this step
            return False, gone
        late = a.deadline_at is not None and now >= a.deadline_at
        if a.step == StepKind.STOP.value:
            if stop_converged(deploy):
                return True, None
            return False, self._late(Phase.STOP_TIMEOUT, a, deploy) if late else None
        if a.step == StepKind.SCALE_DOWN.value:
            if scale_down_converged(deploy, a.replicas or 1):
                return True, None
            return False, self._late(Phase.STOP_TIMEOUT, a, deploy) if late else None
        if acquire_ready(deploy, a.replicas or deploy.desired_replicas):
            return self._witnessed(a, deploy, late)
        if deploy.refused:  # the API server will not create the pods: no deadline will help
            return False, verdict(
                Phase.START_REFUSED,
                extra=f"{a.deploy_id}: {deploy.refused}",
                detail=_deploy_detail(deploy),
            )
        if deploy.unschedulable and deploy.scale_up == "not_triggered":
            return False, verdict(
                Phase.START_UNSCHEDULABLE,
                extra=f"{a.deploy_id} pods unschedulable and the cluster autoscaler will not add a "
                "node for them (NotTriggerScaleUp)",
                detail=_deploy_detail(deploy),
            )
        if deploy.unschedulable and deploy.scale_up != "triggered":  # a node is coming: wait
            since = self._unschedulable_since(a, now)
            if (now - since).total_seconds() >= unschedulable_grace_s(a, self.config):
                return False, verdict(
                    Phase.START_UNSCHEDULABLE,
                    extra=f"{a.deploy_id} pods unschedulable since {since.isoformat()}",
                    detail=_deploy_detail(deploy),
                )
        return False, self._late(Phase.READINESS_TIMEOUT, a, deploy) if late else None

    def _witnessed(
        self, a: ActionRow, deploy: DeployView, late: bool
    ) -> tuple[bool, Verdict | None]:
        if self.witness is None or deploy.reservation is None:
            return True, None
        seen = self.witness(deploy)
        if seen is True:
            return True, None
        if isinstance(seen, Verdict):
            return False, seen
        return False, self._late(Phase.READINESS_TIMEOUT, a, deploy) if late else None

    def _unschedulable_since(self, a: ActionRow, now: datetime) -> datetime:
        since = a.unschedulable_since
        if since is not None:
            return since
        detail = {**(a.detail or {}), UNSCHEDULABLE_SINCE: now.isoformat()}
        self.store.update_action(a.id, expect=(StepState.ACCEPTED,), now=now, detail=detail)
        return now

    @staticmethod
    def _late(phase: Phase, a: ActionRow, deploy: DeployView) -> Verdict:
        when = a.deadline_at.isoformat() if a.deadline_at else "?"
        return verdict(
            phase,
            extra=f"{a.deploy_id} {a.step} not converged by {when}",
            detail=_deploy_detail(deploy),
        )


def _deploy_detail(deploy: DeployView) -> dict[str, Any]:
    return {
        "state": deploy.state.value,
        "ready_replicas": deploy.ready_replicas,
        "desired_replicas": deploy.desired_replicas,
        "terminating_pods": deploy.terminating_pods,
        "unschedulable": deploy.unschedulable,
        "allocation_kept": deploy.state is not DeployState.STOPPED,
    }
