"""Eligibility, re-checked on every pass (SPEC R-PASS-4).

A target the schedule may not act on is ``ineligible{reason}`` — terminal,
with a fix text — and is re-examined on the next pass, so repairing the
cause clears it.
"""

from __future__ import annotations

from gps_dagster.domain.kinds import UNSUPPORTED_KINDS, scale_refusal
from gps_dagster.domain.spec import Schedule
from gps_dagster.ports import DeployState, DeployView


def declares_replicas(schedule: Schedule, deploy_id: str) -> bool:
    """Whether any window state or the target default asks this deploy for a replica count."""
    target = schedule.target(deploy_id)
    if target.default_replicas is not None:
        return True
    return any(s.model_deploy_id == deploy_id and s.replicas is not None for w in schedule.windows for s in w.states)


def ineligible_reason(schedule: Schedule, deploy: DeployView | None) -> str | None:
    """The reason code if the schedule may not act on ``deploy`` now, else None."""
    if deploy is None or deploy.state in (DeployState.DELETING, DeployState.FAILED):
        return "target_failed"
    if deploy.kind in UNSUPPORTED_KINDS:
        return "unsupported_kind"
    project = schedule.project
    if project is None and deploy.cmp_managed:
        return "cmp_managed"
    if project is not None and deploy.project != project:
        return "scope_changed"
    if declares_replicas(schedule, deploy.id) and scale_refusal(
        deploy.kind, hpa=deploy.hpa, cmp_endpoint=deploy.endpoint is not None
    ):
        return "unsupported_scale_for_mode"
    return None
