"""GPU reservations inside the simulated pool (R-GPS): barrier, admission, holder, witness.

What a reservation-aware control plane does, in the pool's own transaction:

* **barrier** — reserved GPUs are off limits to unbound deploys, foreign
  workloads and intruders; a bound replica lands only on its reservations'
  GPUs (only the ``misplace`` fault can put it elsewhere, for the witness);
* **admission** (R-GPS-3) — a time-sliced member starts only when Σ
  ``memory_mib`` of members running + in flight + itself fits the budget,
  decided by ``gps.admission.admit`` under the reservation row lock (and the
  pool lock), so two starts racing for the last MiB cannot both win;
* **holder** (R-GPS-6) — a time-sliced GPU is one row ``held`` by the
  reservation while fractional pods (``sim_share``) sit on it; when no member
  is ready the minimal holder ``holder:<rsv>`` keeps the group alive, and it
  goes once a member is ready again — added in the same transaction that
  removes the last member, so the group is never observed empty;
* **witness** (R-GPS-7) — the UUIDs each ready replica group got.

Fractional pods terminate at once on stop (no grace period): their VRAM is
admission bookkeeping, not a GPU the pool hands back.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import Connection, Row

from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.context import Ctx
from gps_dagster.backends.sim.pure import (
    HOLDER_MIB,
    WITNESS_SOURCE,
    Binding,
    admission_message,
    admission_view,
    binding_view,
    holder_id,
)
from gps_dagster.domain.gps.admission import Admitted, Decision, Ineligible, admit
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.gps.holders import holder_wanted
from gps_dagster.domain.pool import DeployReservation, PoolSpec
from gps_dagster.ports import (
    AdmissionPreview,
    AdmissionRefused,
    CapacityPreview,
    Fits,
    Insufficient,
    WitnessResult,
)

__all__ = [
    "HOLDER_MIB",
    "WITNESS_SOURCE",
    "Binding",
    "admit_start",
    "attach_member",
    "binding_view",
    "bound_to",
    "capacity",
    "decide",
    "detach_member",
    "exclusive_choices",
    "holder_id",
    "load_bindings",
    "preview",
    "save_bindings",
    "shared_usage",
    "sync_holders",
    "witness",
]

_REF = TypeAdapter(DeployReservation)


# -- bindings (fixed at load) ------------------------------------------------------------------


def save_bindings(conn: Connection, spec: PoolSpec) -> None:
    rows = [
        {"pool": spec.name, "deploy": d.id, "spec": d.reservation.model_dump_json()}
        for d in spec.deploys
        if d.reservation is not None
    ]
    if rows:
        conn.execute(t.bindings.insert(), rows)


def load_bindings(conn: Connection, pool: str) -> dict[str, Binding]:
    b, d = t.bindings, t.deploys
    rows = conn.execute(
        sa.select(b.c.deploy, b.c.spec, d.c.gpus_per_replica)
        .join(d, sa.and_(d.c.pool == b.c.pool, d.c.id == b.c.deploy))
        .where(b.c.pool == pool)
    )
    out: dict[str, Binding] = {}
    for deploy, spec, gpr in rows:
        ref = _REF.validate_python(json.loads(spec))
        out[deploy] = (
            ref
            if isinstance(ref, TimeSlicedBinding)
            else ExclusiveBinding(gpus_per_replica=gpr, reservations=ref.reservations)
        )
    return out


def bound_to(ctx: Ctx, reservation_id: str) -> list[str]:
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


# -- placement -----------------------------------------------------------------------------------


def exclusive_choices(ctx: Ctx, binding: ExclusiveBinding, misplaced: bool) -> list[frozenset[str]]:
    """GPU sets one replica may take whole: one per ACTIVE reservation, or (fault) anything else."""
    own = [
        frozenset(ctx.ledger.uuids.get(r, ()))
        for r in binding.reservations
        if ctx.ledger.active(r) is not None
    ]
    if not misplaced:
        return own
    everything = frozenset(
        str(u)
        for u in ctx.conn.execute(
            sa.select(t.gpus.c.uuid).where(t.gpus.c.pool == ctx.pool)
        ).scalars()
    )
    return [everything.difference(*own)]


def _take_group_gpu(ctx: Ctx, reservation_id: str, uuid: str) -> bool:
    """Hold the shared GPU for the reservation's group; False while it is still being released."""
    g = t.gpus
    row = ctx.conn.execute(
        sa.select(g.c.state, g.c.holder).where(g.c.pool == ctx.pool, g.c.uuid == uuid)
    ).first()
    if row is None:
        return False
    if row.state == "held":
        return bool(row.holder == reservation_id)
    if row.state != "free":
        return False
    ctx.conn.execute(
        g.update()
        .where(g.c.pool == ctx.pool, g.c.uuid == uuid, g.c.state == "free")
        .values(state="held", holder=reservation_id, holder_type="shared", grp=None, until=None)
    )
    ctx.touched.add(reservation_id)
    return True


def attach_member(ctx: Ctx, deploy_id: str, binding: TimeSlicedBinding, misplaced: bool) -> bool:
    """Put a member's fractional pod on the reservation's GPU (or, under ``misplace``, a
    neighbour)."""
    rsv = ctx.ledger.active(binding.reservation)
    uuids = ctx.ledger.uuids.get(binding.reservation, ())
    if rsv is None or not uuids:
        return False
    uuid = uuids[0]
    if misplaced:
        g = t.gpus
        uuid = (
            ctx.conn.execute(
                sa.select(g.c.uuid)
                .where(g.c.pool == ctx.pool, g.c.node == rsv.node, g.c.uuid.not_in(list(uuids)))
                .order_by(g.c.idx)
                .limit(1)
            ).scalar_one_or_none()
            or uuid
        )
    elif not _take_group_gpu(ctx, rsv.id, uuid):
        return False
    s = t.shares
    ctx.conn.execute(s.delete().where(s.c.pool == ctx.pool, s.c.occupant == deploy_id))
    ctx.conn.execute(
        s.insert().values(
            pool=ctx.pool,
            reservation=rsv.id,
            occupant=deploy_id,
            kind="member",
            gpu_uuid=uuid,
            memory_mib=binding.memory_mib,
        )
    )
    ctx.touched.add(rsv.id)
    return True


def detach_member(ctx: Ctx, deploy_id: str) -> None:
    s = t.shares
    ctx.conn.execute(
        s.delete().where(s.c.pool == ctx.pool, s.c.occupant == deploy_id, s.c.kind == "member")
    )


def sync_holders(ctx: Ctx) -> None:
    """Keep each time-sliced group alive: a holder iff no member is ready; release an empty
    group."""
    s, g = t.shares, t.gpus
    for rsv in ctx.ledger.time_sliced():
        uuids = ctx.ledger.uuids.get(rsv.id, ())
        occupants = dict(
            ctx.conn.execute(
                sa.select(s.c.occupant, s.c.kind).where(
                    s.c.pool == ctx.pool, s.c.reservation == rsv.id
                )
            ).all()
        )
        members = [o for o, k in occupants.items() if k == "member"]
        ready = _ready_deploys(ctx, members)
        holder = holder_id(rsv.id)
        if (
            holder_wanted(rsv, running=ready)
            and holder not in occupants
            and uuids
            and _take_group_gpu(ctx, rsv.id, uuids[0])
        ):
            ctx.conn.execute(
                s.insert().values(
                    pool=ctx.pool,
                    reservation=rsv.id,
                    occupant=holder,
                    kind="holder",
                    gpu_uuid=uuids[0],
                    memory_mib=HOLDER_MIB,
                )
            )
            occupants[holder] = "holder"
            ctx.touched.add(rsv.id)
        elif not holder_wanted(rsv, running=ready) and holder in occupants:
            ctx.conn.execute(s.delete().where(s.c.pool == ctx.pool, s.c.occupant == holder))
            del occupants[holder]
            ctx.touched.add(rsv.id)
        if not occupants:  # nobody on the GPU: the group dissolves and the GPU is released
            released = ctx.conn.execute(
                g.update()
                .where(g.c.pool == ctx.pool, g.c.holder == rsv.id, g.c.state == "held")
                .values(state="terminating", until=ctx.now + ctx.timings.stop_grace_s)
            ).rowcount
            if released:
                ctx.touched.add(rsv.id)


def _ready_deploys(ctx: Ctx, deploys: Collection[str]) -> list[str]:
    if not deploys:
        return []
    gr = t.groups
    rows = ctx.conn.execute(
        sa.select(gr.c.deploy)
        .where(gr.c.pool == ctx.pool, gr.c.deploy.in_(list(deploys)), gr.c.state == "ready")
        .distinct()
    )
    return sorted(str(r[0]) for r in rows)


def shared_usage(ctx: Ctx) -> dict[str, list[str]]:
    """reservation -> fractional pods on its GPU (members and holder), for the usage history."""
    s = t.shares
    out: dict[str, list[str]] = {}
    for rid, occupant in ctx.conn.execute(
        sa.select(s.c.reservation, s.c.occupant).where(s.c.pool == ctx.pool)
    ):
        out.setdefault(str(rid), []).append(str(occupant))
    return {k: sorted(v) for k, v in sorted(out.items())}


# -- admission (R-GPS-3) ---------------------------------------------------------------------------


def _members(
    ctx: Ctx, reservation_id: str, skip: Collection[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """(running, in flight) members of a time-sliced reservation with their ``memory_mib``."""
    members = {
        d: b.memory_mib
        for d, b in ctx.bindings.items()
        if isinstance(b, TimeSlicedBinding) and b.reservation == reservation_id and d not in skip
    }
    if not members:
        return {}, {}
    d = t.deploys
    started = [
        str(r[0])
        for r in ctx.conn.execute(
            sa.select(d.c.id).where(
                d.c.pool == ctx.pool, d.c.id.in_(list(members)), d.c.running.is_(True)
            )
        )
    ]
    ready = set(_ready_deploys(ctx, started))
    return (
        {m: members[m] for m in started if m in ready},
        {m: members[m] for m in started if m not in ready},
    )


def decide(
    ctx: Ctx, row: Row[Any], *, releasing: Collection[str] = (), lock: bool = False
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
    if lock:
        rsv = ctx.ledger.lock(ctx.conn, rsv.id)
    running, flying = _members(ctx, rsv.id, skip=set(releasing))
    return admit(rsv, running=running, in_flight=flying, proposed=(row.id, binding.memory_mib))


def admit_start(ctx: Ctx, row: Row[Any]) -> None:
    """Raise ``AdmissionRefused`` unless the start fits (serialised on the reservation row)."""
    decision = decide(ctx, row, lock=True)
    if decision is None or isinstance(decision, Admitted):
        return
    raise AdmissionRefused(decision.reason, admission_message(row.id, decision))


def preview(ctx: Ctx, row: Row[Any], releasing: Collection[str]) -> AdmissionPreview:
    return admission_view(row.id, decide(ctx, row, releasing=releasing))


# -- capacity preview and witness ------------------------------------------------------------------


def capacity(ctx: Ctx, row: Row[Any], delta: int) -> CapacityPreview | None:
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
        g = t.gpus
        for node, n in ctx.conn.execute(
            sa.select(g.c.node, sa.func.count())
            .where(g.c.pool == ctx.pool, g.c.state == "free", g.c.uuid.in_(list(among)))
            .group_by(g.c.node)
        ):
            free[str(node)] = free.get(str(node), 0) + int(n)
            groups += int(n) // per_node
    if groups >= delta:
        return Fits(groups=delta)
    return Insufficient("insufficient_capacity", dict(sorted(free.items())), delta, groups)


def _group_gpu_usable(ctx: Ctx, reservation_id: str, uuid: str) -> bool:
    g = t.gpus
    row = ctx.conn.execute(
        sa.select(g.c.state, g.c.holder).where(g.c.pool == ctx.pool, g.c.uuid == uuid)
    ).first()
    return row is not None and (
        row.state == "free" or (row.state == "held" and row.holder == reservation_id)
    )


def witness(ctx: Ctx, deploy_id: str) -> WitnessResult:
    """UUIDs per ready replica group, as placement gave them."""
    gr, g, s = t.groups, t.gpus, t.shares
    ready = [
        int(r[0])
        for r in ctx.conn.execute(
            sa.select(gr.c.grp)
            .where(gr.c.pool == ctx.pool, gr.c.deploy == deploy_id, gr.c.state == "ready")
            .order_by(gr.c.grp)
        )
    ]
    if not ready:
        return WitnessResult(deploy_id, (), WITNESS_SOURCE)
    if isinstance(ctx.bindings.get(deploy_id), TimeSlicedBinding):
        uuid = ctx.conn.execute(
            sa.select(s.c.gpu_uuid).where(s.c.pool == ctx.pool, s.c.occupant == deploy_id)
        ).scalar_one_or_none()
        return WitnessResult(deploy_id, ((str(uuid),),) if uuid else (), WITNESS_SOURCE)
    by_grp: dict[int, list[str]] = {}
    for grp, uuid in ctx.conn.execute(
        sa.select(g.c.grp, g.c.uuid)
        .where(
            g.c.pool == ctx.pool, g.c.holder == deploy_id, g.c.state == "held", g.c.grp.in_(ready)
        )
        .order_by(g.c.grp, g.c.node, g.c.idx)
    ):
        by_grp.setdefault(int(grp), []).append(str(uuid))
    return WitnessResult(deploy_id, tuple(tuple(by_grp[k]) for k in sorted(by_grp)), WITNESS_SOURCE)
