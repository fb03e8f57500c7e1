"""What stop, start and set_replica_intent do to the in-memory pool (``backends.sim.mutations``).

The same admission, in the same order: billing and project quota on start and
scale-up, alias consent on stop, scale support by deploy kind, the VRAM budget of
a time-sliced reservation; and the faults' effects on the pool (``backends.sim.faults``).
"""

from __future__ import annotations

from gps_dagster.backends.sim.memory import reserved
from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.dynamics import mark_applied_if_placed, place_pending, release
from gps_dagster.backends.sim.memory.state import DeployRec, FaultRec, GroupRec, PoolState
from gps_dagster.backends.sim.mutations import Blocks, Outcome
from gps_dagster.backends.sim.pure import names, refuse_forced, reservation_of
from gps_dagster.domain.gps.billing import Workload, quota_usage, reservation_project
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.domain.kinds import DeployKind, scale_refusal
from gps_dagster.domain.pool import ONE_SHOT_EFFECTS, FaultSpec
from gps_dagster.ports import (
    AdmissionRefused,
    BillingRefused,
    Permanent,
    QuotaRefused,
    QuotaStatus,
    Unsupported,
)

__all__ = [
    "check_billing",
    "check_quota",
    "clear_faults",
    "insert_fault",
    "persistent",
    "set_replica_intent",
    "start",
    "stop",
    "take_faults",
]


def _bump(ctx: MemCtx, row: DeployRec, *, applied: bool) -> None:
    row.version += 1
    row.generation += 1
    if applied:
        row.applied_generation = row.generation


def stop(ctx: MemCtx, row: DeployRec, *, allow_aliased_downtime: bool, blocks: Blocks) -> Outcome:
    if row.id in blocks.fail_stop:
        raise Permanent(f"stop of {row.id} failed", reason="stop_failed")
    if row.forced_state == "DELETING":
        raise AdmissionRefused("deploy_deleting", f"{row.id} is being deleted")
    if names(row.aliases) and not allow_aliased_downtime:
        raise AdmissionRefused(
            "alias_requires_consent", f"{row.id} has an alias; pass allow_aliased_downtime=True"
        )
    if not row.running:
        return Outcome(changed=False)
    release(ctx, row.id)
    for grp in list(ctx.state.groups[row.id]):
        ctx.state.drop_group(row.id, grp)
    if isinstance(ctx.bindings.get(row.id), TimeSlicedBinding):
        reserved.detach_member(ctx, row.id)
        reserved.sync_holders(ctx)  # the holder arrives in the same call the last member leaves
    row.running = False
    _bump(ctx, row, applied=True)
    return Outcome(changed=True)


def start(ctx: MemCtx, row: DeployRec, *, blocks: Blocks) -> Outcome:
    if row.id in blocks.fail_start:
        raise Permanent(f"start of {row.id} failed", reason="start_failed")
    refuse_forced(row)
    check_billing(ctx, row)
    if row.running:
        return Outcome(changed=False)
    check_quota(ctx, row, delta_replicas=row.desired)
    reserved.admit_start(ctx, row)
    _add_groups(ctx, row, row.next_grp, row.desired)
    row.running, row.next_grp = True, row.next_grp + row.desired
    _bump(ctx, row, applied=False)
    _place(ctx, row, blocks)
    return Outcome(changed=True)


def set_replica_intent(ctx: MemCtx, row: DeployRec, replicas: int, *, blocks: Blocks) -> Outcome:
    if replicas < 1:
        raise AdmissionRefused("replicas_must_be_positive", "use stop for zero replicas")
    refusal = scale_refusal(
        DeployKind(row.kind), hpa=bool(row.hpa), cmp_endpoint=row.endpoint is not None
    )
    if refusal:
        raise Unsupported(
            refusal, f"{row.id} ({row.kind}) cannot be scaled by a schedule: {refusal}"
        )
    refuse_forced(row)
    if isinstance(ctx.bindings.get(row.id), TimeSlicedBinding) and replicas != 1:
        raise Unsupported(
            "unsupported_scale_for_mode",
            f"{row.id} is a time-sliced member: one replica on its reservation's GPU",
        )
    if not row.running:
        row.desired = row.role_min = row.role_max = replicas
        _bump(ctx, row, applied=True)
        return Outcome(changed=True, persist_only=True)
    delta = replicas - row.desired
    if delta > 0:
        check_billing(ctx, row)
        check_quota(ctx, row, delta_replicas=delta)
        _add_groups(ctx, row, row.next_grp, delta)
        row.next_grp += delta
        row.desired = row.role_min = row.role_max = replicas
        _bump(ctx, row, applied=False)
        _place(ctx, row, blocks)
    else:
        _remove_groups(ctx, row, -delta)
        row.desired = row.role_min = row.role_max = replicas
        _bump(ctx, row, applied=True)
    return Outcome(changed=True)


def _add_groups(ctx: MemCtx, row: DeployRec, first: int, count: int) -> None:
    for i in range(count):
        ctx.state.add_group(GroupRec(row.id, first + i))


_ORDER = {"pending": 0, "starting": 1}


def _remove_groups(ctx: MemCtx, row: DeployRec, count: int) -> None:
    """Scale down: pending groups go first, then the youngest."""
    if count <= 0:
        return
    groups = ctx.state.groups[row.id]
    victims = [
        g.grp for g in sorted(groups.values(), key=lambda g: (_ORDER.get(g.state, 2), -g.grp))
    ][:count]
    release(ctx, row.id, victims)
    for grp in victims:
        ctx.state.drop_group(row.id, grp)


def _place(ctx: MemCtx, row: DeployRec, blocks: Blocks) -> None:
    if row.id not in place_pending(ctx, blocks.unschedulable, blocks.never_ready):
        mark_applied_if_placed(ctx, row)  # nothing to place (no group added) applies too


def check_billing(ctx: MemCtx, row: DeployRec) -> None:
    if row.project is None:
        return
    project = ctx.state.projects.get(row.project)
    if project is not None and project.billing == "unpaid":
        raise BillingRefused(f"project {row.project} is unpaid", project=row.project)


def check_quota(ctx: MemCtx, row: DeployRec, *, delta_replicas: int) -> QuotaStatus:
    """Project GPUs held (running deploys by their role ceiling; reservations once) + the request ≤
    quota."""
    requested = max(delta_replicas, 0) * row.gpus_per_replica
    if row.project is None:
        return QuotaStatus(project=None, quota=None, used=0, requested=requested)
    project = ctx.state.projects.get(row.project)
    quota = None if project is None else project.gpu_quota
    held = [r for r in ctx.ledger.rsvs.values() if reservation_project(r) == row.project]
    if reservation_of(ctx.bindings.get(row.id)) in {r.id for r in held}:
        requested = 0
    workloads = [
        Workload(
            d.id, d.role_max * d.gpus_per_replica, 0, 0, reservation_of(ctx.bindings.get(d.id))
        )
        for d in ctx.state.deploys.values()
        if d.project == row.project and d.running
    ]
    used = quota_usage(held, workloads).gpus
    if quota is not None and used + requested > quota:
        raise QuotaRefused(
            f"project {row.project}: {used} GPUs held + {requested} requested > quota {quota}",
            project=row.project,
            quota=quota,
            used=used,
            requested=requested,
        )
    return QuotaStatus(project=row.project, quota=quota, used=used, requested=requested)


# -- faults (``backends.sim.faults`` on records) ---------------------------------------------------


def insert_fault(state: PoolState, fault: FaultSpec) -> None:
    """Keep a fault; state-forcing effects (failed, deleting, never_ready) act at once."""
    if fault.effect in ("failed", "deleting") and fault.deploy in state.deploys:
        state.deploys[fault.deploy].forced_state = fault.effect.upper()
    if fault.effect == "never_ready" and fault.deploy is not None:
        for g in state.groups.get(fault.deploy, {}).values():
            if g.state == "starting":
                state.set_group(g, g.state, None)
    state.fault_ids += 1
    state.faults.append(
        FaultRec(state.fault_ids, fault, fault.times if fault.effect in ONE_SHOT_EFFECTS else None)
    )


def listed(state: PoolState) -> list[FaultSpec]:
    return [
        f.spec if f.remaining is None else f.spec.model_copy(update={"times": f.remaining})
        for f in state.faults
    ]


def clear_faults(state: PoolState, restart_at: float) -> None:
    """Remove every fault; forced states end and never-ready groups get a fresh start delay."""
    state.faults.clear()
    for d in state.deploys.values():
        d.forced_state = None
    for groups in state.groups.values():
        for g in groups.values():
            if g.state == "starting" and g.ready_at is None:
                state.set_group(g, g.state, restart_at)


def take_faults(state: PoolState, op: str, deploy: str | None) -> list[FaultSpec]:
    """Consume one hit of every one-shot fault matching this call."""
    hits: list[FaultSpec] = []
    for f in list(state.faults):
        if (
            f.remaining is None
            or f.spec.op != op
            or (f.spec.deploy is not None and f.spec.deploy != deploy)
        ):
            continue
        if f.remaining <= 0:
            continue
        f.remaining -= 1
        if f.remaining <= 0:
            state.faults.remove(f)
        hits.append(f.spec)
    return hits


def persistent(state: PoolState) -> list[tuple[str, str | None]]:
    return [(f.spec.effect, f.spec.deploy) for f in state.faults if f.remaining is None]
