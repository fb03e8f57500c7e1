"""Target phases (R-PHASE) and the operator-facing fix texts (R-WARN).

Every failure ends in a *terminal* phase with a machine reason and a human
fix text: nothing hangs. A terminal phase is left only when the effective
intent changes (a new interval) or an operator runs apply-now after fixing
the cause.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    PENDING = "pending"
    RELEASING = "releasing"
    CAPACITY_WAIT = "capacity_wait"
    ACQUIRING = "acquiring"
    AWAITING_READY = "awaiting_ready"
    CONVERGED = "converged"
    OBSERVING = "observing"
    ALIAS_BLOCKED = "alias_blocked"
    QUOTA_REFUSED = "quota_refused"
    BILLING_REFUSED = "billing_refused"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"
    STOP_TIMEOUT = "stop_timeout"
    READINESS_TIMEOUT = "readiness_timeout"
    START_UNSCHEDULABLE = "start_unschedulable"
    START_REFUSED = "start_refused"
    PARTIAL_EXECUTION = "partial_execution"
    INELIGIBLE = "ineligible"
    DRIFT_DETECTED = "drift_detected"
    RESERVATION_OVERCOMMITTED = "reservation_overcommitted"
    PLACEMENT_MISMATCH = "placement_mismatch"
    CRASH_LOOP = "crash_loop"


NON_TERMINAL = frozenset(
    {
        Phase.PENDING,
        Phase.RELEASING,
        Phase.CAPACITY_WAIT,
        Phase.ACQUIRING,
        Phase.AWAITING_READY,
        Phase.CONVERGED,
        Phase.OBSERVING,
    }
)
TERMINAL = frozenset(Phase) - NON_TERMINAL

FIXES: dict[Phase, str] = {
    Phase.ALIAS_BLOCKED: (
        "the deploy has an alias and the intent stops it without consent (or the alias guard is "
        'not wired / failed to read): add "allow_downtime": true to the window state, or fix the '
        "alias guard wiring, then apply-now"
    ),
    Phase.QUOTA_REFUSED: "raise the project's GPU quota (or free GPUs in it), then apply-now",
    Phase.BILLING_REFUSED: "settle the project's billing, then apply-now",
    Phase.CAPACITY_UNAVAILABLE: (
        "the freed GPUs were not published in time or another workload took them: add a "
        "reservation, free capacity, then apply-now (the released deploy is not restarted "
        "automatically)"
    ),
    Phase.STOP_TIMEOUT: "inspect the deploy's terminating pods (stuck finalizers?), then apply-now",
    Phase.READINESS_TIMEOUT: (
        "inspect the deploy (logs, probes); its allocation is kept; then apply-now"
    ),
    Phase.START_UNSCHEDULABLE: (
        "pods cannot be scheduled (capacity taken, taints, flavor): inspect the deploy; its "
        "allocation is kept; then apply-now"
    ),
    Phase.START_REFUSED: (
        "the API server refused to create the deploy's pods (quota on cpu/memory/pods, LimitRange, "
        "Pod Security, an admission webhook): fix what its message names, then apply-now; the "
        "allocation is kept"
    ),
    Phase.PARTIAL_EXECUTION: "see the per-member receipt: fix each failed member, then apply-now",
    Phase.INELIGIBLE: "see the reason: the schedule cannot act on this deploy until it changes",
    Phase.DRIFT_DETECTED: (
        "none needed: a manual change is respected until the effective intent changes"
    ),
    Phase.RESERVATION_OVERCOMMITTED: (
        "lower memory_mib or stop a member of the reservation, then apply-now"
    ),
    Phase.CRASH_LOOP: (
        "the server crashed after it had been ready and the kubelet keeps restarting it "
        "(CrashLoopBackOff): read the previous container's logs (kubectl logs --previous) and fix "
        "the cause; nothing was stopped (its GPUs stay allocated); then apply-now"
    ),
    Phase.PLACEMENT_MISMATCH: (
        "the pod landed on a GPU outside its reservation: inspect placement (binder/DCGM), re-pin "
        "or restart the deploy by hand; no automatic repair"
    ),
}

INELIGIBLE_FIXES: dict[str, str] = {
    "target_failed": (
        "the deploy is DELETING, FAILED or gone: repair or recreate it, or remove it from the "
        "schedule"
    ),
    "cmp_managed": (
        "an admin schedule may not target a CMP-managed deploy: move it to the project's "
        "cmp:<project> schedule"
    ),
    "unsupported_kind": "fine-tune, batch and fwc deploys cannot be scheduled: remove the target",
    "unsupported_scale_for_mode": (
        "this deploy kind cannot be scaled by a schedule (autoscaler, KServe/Knative, "
        'disaggregated, CMP endpoint): drop "replicas" from its window states and default_replicas'
    ),
    "scope_changed": (
        "the deploy no longer belongs to this schedule's project: move it to the right schedule"
    ),
    "endpoint_partially_running": (
        "the CMP endpoint was found partly running before the schedule acted: start or stop all "
        "its members by hand, then apply-now"
    ),
    "deploy_replaced": (
        "another object now carries this deploy id (deleted and re-created by GitOps or by hand, "
        "or an impostor label): the schedule will not act on it. Check it is the workload you "
        "mean, then run `gps-dagster schedules reclaim SCHEDULE DEPLOY_ID` and apply-now (or "
        "remove the target)"
    ),
    "gitops_owned": (
        "a GitOps tool owns spec.replicas and would revert every stop: omit replicas from Git (or "
        "add an Argo CD ignoreDifferences on /spec/replicas and the gps.dagster.io annotations, "
        "with RespectIgnoreDifferences=true), then apply-now"
    ),
}


def is_terminal(phase: str) -> bool:
    return phase in {p.value for p in TERMINAL}


def fix_for(phase: Phase, reason: str | None = None) -> str:
    """The operator fix text for a terminal phase (and an ineligible reason)."""
    if phase is Phase.INELIGIBLE and reason in INELIGIBLE_FIXES:
        return INELIGIBLE_FIXES[reason]
    return FIXES.get(phase, "")
