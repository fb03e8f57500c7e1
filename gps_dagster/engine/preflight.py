"""Preflight: read-only checks of every step before the first release (SPEC R-PASS-6).

If any acquiring step would be refused (quota, billing, endpoint members not
all STOPPED, reservation budget), or a releasing stop would be refused by the
alias guard, nothing in the plan is executed: A is not stopped for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import PlannedStep, StepKind, Wanted
from gps_dagster.engine.endpoints import member_ids
from gps_dagster.engine.outcomes import Verdict, from_core_error, verdict
from gps_dagster.ports import AliasGuardUnavailable, Core, CoreError, DeployState, DeployView

ReservationCheck = Callable[[DeployView, PlannedStep], Verdict | None]
"""Optional GPS admission preview (R-GPS-3); returns a refusal or None."""


def check_step(
    core: Core,
    step: PlannedStep,
    wanted: Wanted,
    deploy: DeployView,
    reservation_check: ReservationCheck | None = None,
) -> Verdict | None:
    """The refusal this step would meet, or None when it may go ahead."""
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
            core.check_quota(deploy_id, delta_replicas=step.delta_replicas if deploy_id == deploy.id else 1)
            core.check_billing(deploy_id)
        if deploy.endpoint is not None and step.kind is StepKind.START:
            busy = [m.id for m in core.list_members(deploy.endpoint) if m.state is not DeployState.STOPPED and m.id != deploy.id]
            if busy:
                return verdict(Phase.INELIGIBLE, "endpoint_partially_running", detail={"running_members": busy})
        if reservation_check is not None:
            return reservation_check(deploy, step)
    except CoreError as exc:
        return from_core_error(exc)
    return None


def _alias(core: Core, wanted: Wanted, deploy_id: str) -> Verdict | None:
    """Fail closed: an unreadable or unwired guard blocks the stop (R-PASS-8)."""
    try:
        info = core.alias_guard(deploy_id)
    except AliasGuardUnavailable as exc:
        return verdict(Phase.ALIAS_BLOCKED, f"alias_guard_{exc.reason}", extra=f"alias guard {exc.reason}")
    if info.has_alias and not wanted.allow_downtime:
        return verdict(
            Phase.ALIAS_BLOCKED,
            "alias_without_consent",
            extra=f"{deploy_id} serves alias(es) {', '.join(info.aliases)} and the intent stops it without allow_downtime",
            detail={"aliases": list(info.aliases)},
        )
    return None


def preflight(
    core: Core,
    steps: Mapping[str, tuple[PlannedStep, Wanted, DeployView]],
    reservation_check: ReservationCheck | None = None,
) -> dict[str, Verdict]:
    """Every refusal in the plan, by deploy id (empty: the plan may run)."""
    out: dict[str, Verdict] = {}
    for deploy_id, (step, wanted, deploy) in sorted(steps.items()):
        refusal = check_step(core, step, wanted, deploy, reservation_check)
        if refusal is not None:
            out[deploy_id] = refusal
    return out
