"""GPU reservations inside the in-memory pool (R-GPS): ``backends.sim.reserved`` on records.

Barrier, bound placement, time-sliced members and their holder, VRAM admission
and the witness, with the same rules and order as the SQL pool; admission reads
the reservation again under the ledger's lock (``ReservationLedger.locked``).
"""

from __future__ import annotations

from collections.abc import Collection

from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.state import DeployRec, ShareRec
from gps_dagster.backends.sim.pure import (
    HOLDER_MIB,
    WITNESS_SOURCE,
    admission_message,
    admission_view,
    holder_id,
)
from gps_dagster.domain.gps.admission import Admitted, Decision, Ineligible, admit
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.gps.holders import holder_wanted
from gps_dagster.ports import (
    AdmissionPreview,
    AdmissionRefused,
    CapacityPreview,
    Fits,
    Insufficient,
    WitnessResult,
)

__all__ = [
    "admit_start",
    "attach_member",
    "bound_to",
    "capacity",
    "decide",
    "detach_member",
    "exclusive_choices",
    "preview",
    "shared_usage",
    "sync_holders",
    "witness",
]


def bound_to(ctx: MemCtx, reservation_id: str) -> list[str]:
    """Deploys whose binding names the reservation."""
    return [
        d
        for d, b in ctx.bindings.items()
        if (
            b.reservation == reservation_id
            if isinstance(b, TimeSlicedBinding)
            else reservation_id in b.reservations
        )
    ]


def exclusive_choices(
    ctx: MemCtx, binding: ExclusiveBinding, misplaced: bool
) -> list[frozenset[str]]:
    """GPU sets one replica may take whole: one per ACTIVE reservation, or (fault) anything else."""
    own = [
        frozenset(ctx.ledger.uuids.get(r, ()))
        for r in binding.reservations
        if ctx.ledger.active(r) is not None
    ]
    if not misplaced:
        return own
    return [frozenset(ctx.state.gpus).difference(*own)]


def _take_group_gpu(ctx: MemCtx, reservation_id: str, uuid: str) -> bool:
    """Hold the shared GPU for the reservation's group; False while it is still being released."""
    g = ctx.state.gpus.get(uuid)
    if g is None:
        return False
    if g.state == "held":
        return g.holder == reservation_id
    if g.state != "free":
        return False
    ctx.state.set_gpu(g, "held", holder=reservation_id, holder_type="shared", grp=None, until=None)
    return True


def attach_member(ctx: MemCtx, deploy_id: str, binding: TimeSlicedBinding, misplaced: bool) -> bool:
    """Put a member's fractional pod on the reservation's GPU (or, under ``misplace``, a
    neighbour)."""
    rsv = ctx.ledger.active(binding.reservation)
    uuids = ctx.ledger.uuids.get(binding.reservation, ())
    if rsv is None or not uuids:
        return False
    uuid = uuids[0]
    if misplaced:
        neighbour = next(
            (g.uuid for g in ctx.state.by_node.get(rsv.node, []) if g.uuid not in uuids), None
        )
        uuid = neighbour or uuid
    elif not _take_group_gpu(ctx, rsv.id, uuid):
        return False
    ctx.state.shares.pop(deploy_id, None)
    ctx.state.shares[deploy_id] = ShareRec(rsv.id, deploy_id, "member", uuid, binding.memory_mib)
    return True


def detach_member(ctx: MemCtx, deploy_id: str) -> None:
    share = ctx.state.shares.get(deploy_id)
    if share is not None and share.kind == "member":
        del ctx.state.shares[deploy_id]


def _occupants(ctx: MemCtx, reservation_id: str) -> dict[str, str]:
    return {
        s.occupant: s.kind for s in ctx.state.shares.values() if s.reservation == reservation_id
    }


def sync_holders(ctx: MemCtx) -> None:
    """Keep each time-sliced group alive: a holder iff no member is ready; release an empty
    group."""
    st = ctx.state
    for rsv in ctx.ledger.time_sliced():
        uuids = ctx.ledger.uuids.get(rsv.id, ())
        occupants = _occupants(ctx, rsv.id)
        ready = _ready_deploys(ctx, [o for o, k in occupants.items() if k == "member"])
        holder = holder_id(rsv.id)
        wanted = holder_wanted(rsv, running=ready)
        if wanted and holder not in occupants and uuids and _take_group_gpu(ctx, rsv.id, uuids[0]):
            st.shares[holder] = ShareRec(rsv.id, holder, "holder", uuids[0], HOLDER_MIB)
            occupants[holder] = "holder"
        elif not wanted and holder in occupants:
            st.shares.pop(holder, None)
            del occupants[holder]
        if not occupants:  # nobody on the GPU: the group dissolves and the GPU is released
            for g in st.of_holder(rsv.id):
                if g.state == "held":
                    st.set_gpu(
                        g,
                        "terminating",
                        holder=g.holder,
                        holder_type=g.holder_type,
                        grp=g.grp,
                        until=ctx.now + ctx.timings.stop_grace_s,
                    )


def _ready_deploys(ctx: MemCtx, deploys: Collection[str]) -> list[str]:
    groups = ctx.state.groups
    return sorted(
        d for d in set(deploys) if any(g.state == "ready" for g in groups.get(d, {}).values())
    )


def shared_usage(ctx: MemCtx) -> dict[str, list[str]]:
    """reservation -> fractional pods on its GPU (members and holder), for the usage history."""
    out: dict[str, list[str]] = {}
    for s in ctx.state.shares.values():
        out.setdefault(s.reservation, []).append(s.occupant)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _members(
    ctx: MemCtx, reservation_id: str, skip: Collection[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """(running, in flight) members of a time-sliced reservation with their ``memory_mib``."""
    members = {
        d: b.memory_mib
        for d, b in ctx.bindings.items()
        if isinstance(b, TimeSlicedBinding) and b.reservation == reservation_id and d not in skip
    }
    if not members:
        return {}, {}
    started = [d.id for d in ctx.state.deploys.values() if d.id in members and d.running]
    ready = set(_ready_deploys(ctx, started))
    return (
        {m: members[m] for m in started if m in ready},
        {m: members[m] for m in started if m not in ready},
    )


def decide(
    ctx: MemCtx, row: DeployRec, *, releasing: Collection[str] = (), lock: bool = False
) -> Decision | None:
    """The admission decision for starting ``row``; None when no VRAM budget applies."""
    binding = ctx.bindings.get(row.id)
    if not isinstance(binding, TimeSlicedBinding):
        return None
    rsv = ctx.ledger.rsvs.get(binding.reservation)
    if rsv is None:
        return Ineligible(
            binding.reservation,
            "unknown_reservation",
            f"reservation '{binding.reservation}' is not in the ledger",
        )
    running, flying = _members(ctx, rsv.id, skip=set(releasing))
    if lock and ctx.book is not None:
        with ctx.book.locked(rsv.id) as locked:
            return admit(
                locked, running=running, in_flight=flying, proposed=(row.id, binding.memory_mib)
            )
    return admit(rsv, running=running, in_flight=flying, proposed=(row.id, binding.memory_mib))


def admit_start(ctx: MemCtx, row: DeployRec) -> None:
    """Raise ``AdmissionRefused`` unless the start fits (decided under the reservation's lock)."""
    decision = decide(ctx, row, lock=True)
    if decision is None or isinstance(decision, Admitted):
        return
    raise AdmissionRefused(decision.reason, admission_message(row.id, decision))


def preview(ctx: MemCtx, row: DeployRec, releasing: Collection[str]) -> AdmissionPreview:
    return admission_view(row.id, decide(ctx, row, releasing=releasing))


def capacity(ctx: MemCtx, row: DeployRec, delta: int) -> CapacityPreview | None:
    """Capacity of a bound deploy, within its reservations only; None for unbound deploys."""
    binding = ctx.bindings.get(row.id)
    if binding is None:
        return None
    if isinstance(binding, TimeSlicedBinding):
        uuids = ctx.ledger.uuids.get(binding.reservation, ())
        rsv = ctx.ledger.active(binding.reservation)
        if rsv is not None and uuids and _group_gpu_usable(ctx, rsv.id, uuids[0]):
            return Fits(groups=delta)
        return Insufficient("insufficient_capacity", {}, delta, 0)
    per_node = row.gpus_per_replica
    groups = 0
    free: dict[str, int] = {}
    for among in exclusive_choices(ctx, binding, misplaced=False):
        counts: dict[str, int] = {}
        for u in among:
            g = ctx.state.gpus[u]
            if g.state == "free":
                counts[g.node] = counts.get(g.node, 0) + 1
        for node, n in sorted(counts.items()):
            free[node] = free.get(node, 0) + n
            groups += n // per_node
    if groups >= delta:
        return Fits(groups=delta)
    return Insufficient("insufficient_capacity", dict(sorted(free.items())), delta, groups)


def _group_gpu_usable(ctx: MemCtx, reservation_id: str, uuid: str) -> bool:
    g = ctx.state.gpus.get(uuid)
    return g is not None and (
        g.state == "free" or (g.state == "held" and g.holder == reservation_id)
    )


def witness(ctx: MemCtx, deploy_id: str) -> WitnessResult:
    """UUIDs per ready replica group, as placement gave them."""
    ready = sorted(
        g.grp for g in ctx.state.groups.get(deploy_id, {}).values() if g.state == "ready"
    )
    if not ready:
        return WitnessResult(deploy_id, (), WITNESS_SOURCE)
    if isinstance(ctx.bindings.get(deploy_id), TimeSlicedBinding):
        share = ctx.state.shares.get(deploy_id)
        return WitnessResult(
            deploy_id, ((share.gpu_uuid,),) if share and share.gpu_uuid else (), WITNESS_SOURCE
        )
    by_grp: dict[int, list[tuple[str, int, str]]] = {}
    wanted = set(ready)
    for g in ctx.state.of_holder(deploy_id):
        if g.state == "held" and g.grp in wanted:
            by_grp.setdefault(g.grp, []).append((g.node, g.idx, g.uuid))
    return WitnessResult(
        deploy_id,
        tuple(tuple(u for _, _, u in sorted(by_grp[k])) for k in sorted(by_grp)),
        WITNESS_SOURCE,
    )
