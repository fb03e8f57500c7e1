"""What stop, start and set_replica_intent do to the in-memory pool (``backends.sim.mutations``).

The steps of each call are ``seam``'s, the same as the SQL pool's; this module is their
in-memory side (``DEPLOYS``: the state's deploy and group records) and the same admission:
billing and project quota on start and scale-up, the VRAM budget of a time-sliced reservation;
and the faults' effects on the pool (``backends.sim.faults``).
"""

from __future__ import annotations

from gps_dagster.backends.sim.memory import reserved
from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.dynamics import mark_applied_if_placed, place_pending, release
from gps_dagster.backends.sim.memory.state import DeployRec, FaultRec, GroupRec, PoolState
from gps_dagster.backends.sim.pure import (
    Binding,
    Blocks,
    reservation_of,
)
from gps_dagster.domain.gps.billing import Workload, quota_usage, reservation_project
from gps_dagster.domain.pool import ONE_SHOT_EFFECTS, FaultSpec
from gps_dagster.ports import (
    BillingRefused,
    QuotaRefused,
    QuotaStatus,
)

__all__ = [
    "DEPLOYS",
    "check_billing",
    "check_quota",
    "clear_faults",
    "insert_fault",
    "persistent",
    "take_faults",
]


def _bump(ctx: MemCtx, row: DeployRec, *, applied: bool) -> None:
    row.version += 1
    row.generation += 1
    if applied:
        row.applied_generation = row.generation


class _Deploys:
    """The in-memory pool's side of ``seam.Deploys``: the state's records, changed in place."""

    def binding(self, ctx: MemCtx, deploy_id: str) -> Binding | None:
        return ctx.bindings.get(deploy_id)

    def write(self, ctx: MemCtx, row: DeployRec, *, applied: bool, **values: object) -> None:
        for name, value in values.items():
            setattr(row, name, value)
        _bump(ctx, row, applied=applied)

    def add_groups(self, ctx: MemCtx, row: DeployRec, first: int, count: int) -> None:
        _add_groups(ctx, row, first, count)

    def remove_groups(self, ctx: MemCtx, row: DeployRec, count: int) -> None:
        _remove_groups(ctx, row, count)

    def remove_all_groups(self, ctx: MemCtx, row: DeployRec) -> None:
        release(ctx, row.id)
        for grp in list(ctx.state.groups[row.id]):
            ctx.state.drop_group(row.id, grp)

    def place(self, ctx: MemCtx, row: DeployRec, blocks: Blocks) -> None:
        _place(ctx, row, blocks)

    def check_billing(self, ctx: MemCtx, row: DeployRec) -> None:
        check_billing(ctx, row)

    def check_quota(self, ctx: MemCtx, row: DeployRec, *, delta_replicas: int) -> QuotaStatus:
        return check_quota(ctx, row, delta_replicas=delta_replicas)

    def admit_start(self, ctx: MemCtx, row: DeployRec) -> None:
        reserved.admit_start(ctx, row)

    def detach_member(self, ctx: MemCtx, deploy_id: str) -> None:
        reserved.detach_member(ctx, deploy_id)

    def sync_holders(self, ctx: MemCtx) -> None:
        reserved.sync_holders(ctx)


DEPLOYS = _Deploys()


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
