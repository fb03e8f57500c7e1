"""Eligibility, re-checked on every pass (SPEC R-PASS-4).

A target the schedule may not act on is ``ineligible{reason}`` — terminal,
with a fix text — and is re-examined on the next pass, so repairing the
cause clears it.
"""

# Decisions embodied here (docs/decisions.md):
# * “Only eligibility's own `ineligible` is re-examined every pass”
# * “A claim is pinned to the object, at first sight”

from __future__ import annotations

from gps_dagster.domain.kinds import UNSUPPORTED_KINDS, scale_refusal
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.ports import DeployState, DeployView

ELIGIBILITY = "eligibility"
"""``detail.source`` of an ``ineligible`` set by the eligibility check (re-examined every pass)."""


def declares_replicas(schedule: Schedule, deploy_id: str) -> bool:
    """Whether any window state or the target default asks this deploy for a replica count."""
    target = schedule.target(deploy_id)
    if target.default_replicas is not None:
        return True
    return any(
        s.model_deploy_id == deploy_id and s.replicas is not None
        for w in schedule.windows
        for s in w.states
    )


def replaced(deploy: DeployView, pinned: str | None) -> bool:
    """R-K8S-8: the object behind the id is not the one the claim was pinned to.

    A claim is pinned at first sight (``Store.pin``); an unpinned claim, or a backend without an
    object identity (``DeployView.instance`` None), is never "replaced".
    """
    return deploy.instance is not None and pinned is not None and deploy.instance != pinned


def replaced_verdict(pinned: str | None, deploy: DeployView) -> Verdict | None:
    """The terminal verdict of a step whose deploy was replaced since it was planned (or None).

    Marked as the eligibility check's own, so every pass re-examines it: after a re-claim the
    target plans again without waiting for a new interval.
    """
    if not replaced(deploy, pinned):
        return None
    return verdict(
        Phase.INELIGIBLE,
        "deploy_replaced",
        extra=f"{deploy.id} was {pinned}; the id now names {deploy.instance}",
        detail={"source": ELIGIBILITY, "pinned": pinned, "seen": deploy.instance},
    )


def ineligible_reason(
    schedule: Schedule, deploy: DeployView | None, *, pinned: str | None = None
) -> str | None:
    """The reason code if the schedule may not act on ``deploy`` now, else None.

    ``pinned``: the object the claim is pinned to (``Store.pins_for``), None when not pinned.
    """
    if deploy is None or deploy.state in (DeployState.DELETING, DeployState.FAILED):
        return "target_failed"
    if replaced(deploy, pinned):
        return "deploy_replaced"
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
