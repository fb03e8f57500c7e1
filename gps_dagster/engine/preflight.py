"""Preflight: read-only checks of every step before the first release (SPEC R-PASS-6).

If any acquiring step would be refused (quota, billing, endpoint members not
all STOPPED, reservation budget), or a releasing stop would be refused by the
alias guard, nothing in the plan is executed: A is not stopped for nothing.
"""

# Decisions embodied here (docs/decisions.md):
# * “A refused preflight refuses the whole plan”
# * “Quota credits are keyed by the quota the core names”

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gps_dagster.domain import step_rules
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import PlannedStep, StepKind, Wanted
from gps_dagster.engine.endpoints import member_ids
from gps_dagster.engine.outcomes import Verdict, from_core_error, verdict
from gps_dagster.ports import (
    AliasGuardUnavailable,
    CoreError,
    DeployState,
    DeployView,
    PreviewingReads,
    QuotaRefused,
    Transient,
)


class ReservationCheck(Protocol):
    """Optional GPS admission preview (R-GPS-3); returns a refusal or None.

    ``releasing``: deploys the plan stops or scales down before this step
    (release-first), whose VRAM the preview must not count.
    """

    def __call__(
        self, deploy: DeployView, step: PlannedStep, *, releasing: frozenset[str] = ...
    ) -> Verdict | None: ...


@dataclass
class QuotaLedger:
    """Project GPUs the plan frees before its acquiring steps run, and GPUs already granted.

    The core's quota preflight counts what runs *now*; in a release-first plan
    the releasing steps run first, so their GPUs are credited back (a swap
    within one project's quota is not refused), while every acquiring step of
    the plan is charged in turn (two starts cannot both spend the same room).
    """

    freed: dict[str, int] = field(default_factory=dict)
    granted: dict[str, int] = field(default_factory=dict)
    releasing: frozenset[str] = frozenset()
    """Deploys the plan releases before its acquiring steps (for the reservation preview)."""
    released: dict[str, int] = field(default_factory=dict)
    """GPUs each releasing deploy frees; credited to the quota *scope* the core reports for it
    (Kubernetes: a ResourceQuota is per namespace, not per project label; R-K8S-5)."""
    scopes: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def for_plan(
        cls, steps: Mapping[str, tuple[PlannedStep, Wanted, DeployView]], *, release_first: bool
    ) -> QuotaLedger:
        ledger = cls()
        if not release_first:
            return ledger
        ledger.releasing = frozenset(
            d for d, (step, _w, _v) in steps.items() if step.order.value == "release"
        )
        for step, _wanted, deploy in steps.values():
            if step.order.value != "release" or deploy.project is None:
                continue
            held = deploy.role_max if deploy.role_max is not None else deploy.desired_replicas
            groups = held if step.kind is StepKind.STOP else held - (step.replicas or held)
            ledger.freed[deploy.project] = (
                ledger.freed.get(deploy.project, 0) + max(groups, 0) * deploy.gpus_per_replica
            )
        for step, _wanted, deploy in steps.values():
            if step.order.value == "release":
                held = deploy.role_max if deploy.role_max is not None else deploy.desired_replicas
                groups = held if step.kind is StepKind.STOP else held - (step.replicas or held)
                ledger.released[deploy.id] = max(groups, 0) * deploy.gpus_per_replica
        return ledger

    def _scope_of(self, core: PreviewingReads, deploy_id: str) -> str | None:
        if deploy_id not in self.scopes:
            try:
                self.scopes[deploy_id] = core.check_quota(deploy_id, delta_replicas=0).scope
            except QuotaRefused as exc:  # already over: still the same quota
                self.scopes[deploy_id] = exc.scope
        return self.scopes[deploy_id]

    def _freed_in(self, core: PreviewingReads, scope: str) -> int:
        return sum(n for d, n in self.released.items() if n and self._scope_of(core, d) == scope)

    def charge(self, core: PreviewingReads, deploy_id: str, delta_replicas: int) -> None:
        """Raise ``QuotaRefused`` unless the request fits the quota once the plan's releases are
        counted."""
        try:
            q = core.check_quota(deploy_id, delta_replicas=delta_replicas)
            project, quota, used, requested, refused = q.project, q.quota, q.used, q.requested, None
            scope = q.scope
        except QuotaRefused as exc:
            project, quota, used, requested, refused = (
                exc.project,
                exc.quota,
                exc.used,
                exc.requested,
                exc,
            )
            scope = exc.scope
        if quota is None or (scope is None and project is None):
            if refused is not None:
                raise refused
            return
        if scope is not None:  # the quota the core names: credit releases under that one only
            key, freed, what = f"scope:{scope}", self._freed_in(core, scope), f"quota {scope}"
        else:
            key, what = str(project), f"project {project}"
            freed = self.freed.get(str(project), 0)
        granted = self.granted.get(key, 0)
        if used - freed + granted + requested > quota:
            if refused is not None and not freed and not granted:
                raise refused
            raise QuotaRefused(
                f"{what}: {used} GPUs held - {freed} released by the plan + {granted + requested} "
                f"requested > quota {quota}",
                project=project,
                quota=quota,
                used=used - freed + granted,
                requested=requested,
                scope=scope,
            )
        self.granted[key] = granted + requested


def check_step(
    core: PreviewingReads,
    step: PlannedStep,
    wanted: Wanted,
    deploy: DeployView,
    reservation_check: ReservationCheck | None = None,
    ledger: QuotaLedger | None = None,
) -> Verdict | None:
    """The refusal this step would meet, or None when it may go ahead."""
    ledger = ledger or QuotaLedger()
    try:
        ids = member_ids(core, deploy)
        if step.kind is StepKind.STOP:
            for deploy_id in ids:
                refusal = _alias(core, wanted, deploy_id)
                if refusal is not None:
                    return refusal
            return None
        if step.order.value == "release":
            return None
        for deploy_id in ids:
            ledger.charge(core, deploy_id, step.delta_replicas if deploy_id == deploy.id else 1)
            core.check_billing(deploy_id)
        if deploy.endpoint is not None and step.kind is StepKind.START:
            busy = [
                m.id
                for m in core.list_members(deploy.endpoint)
                if m.state is not DeployState.STOPPED and m.id != deploy.id
            ]
            if busy:
                return verdict(
                    Phase.INELIGIBLE, "endpoint_partially_running", detail={"running_members": busy}
                )
        if reservation_check is not None:
            return reservation_check(deploy, step, releasing=ledger.releasing)
    except Transient:
        raise  # not a refusal: the caller retries on its next pass
    except CoreError as exc:
        return from_core_error(exc)
    return None


def _alias(core: PreviewingReads, wanted: Wanted, deploy_id: str) -> Verdict | None:
    """Fail closed: an unreadable or unwired guard blocks the stop (R-PASS-8)."""
    try:
        info = core.alias_guard(deploy_id)
    except AliasGuardUnavailable as exc:
        return verdict(
            Phase.ALIAS_BLOCKED, f"alias_guard_{exc.reason}", extra=f"alias guard {exc.reason}"
        )
    except CoreError as exc:  # any read error of the guard: fail closed, never "no alias"
        return verdict(
            Phase.ALIAS_BLOCKED, "alias_guard_read_error", extra=f"alias guard read error: {exc}"
        )
    if info.has_alias and not wanted.allow_downtime:
        reason, text, detail = step_rules.alias_refusal(deploy_id, info.aliases)
        return verdict(Phase.ALIAS_BLOCKED, reason, extra=text, detail=detail)
    return None


def preflight(
    core: PreviewingReads,
    steps: Mapping[str, tuple[PlannedStep, Wanted, DeployView]],
    reservation_check: ReservationCheck | None = None,
    *,
    release_first: bool = True,
) -> dict[str, Verdict]:
    """Every refusal in the plan, by deploy id (empty: the plan may run)."""
    out: dict[str, Verdict] = {}
    ledger = QuotaLedger.for_plan(steps, release_first=release_first)
    for deploy_id, (step, wanted, deploy) in sorted(steps.items()):
        refusal = check_step(core, step, wanted, deploy, reservation_check, ledger)
        if refusal is not None:
            out[deploy_id] = refusal
    return out
