"""How the simulated pool moves through time: termination, publishing, placement, readiness.

Time advances lazily: every call first applies, inside its own transaction,
every transition due up to the caller's ``now`` (in time order, event batch by
event batch), so the pool is always consistent with the clock no matter which
process looks at it. The simulator never reads the wall clock; instants come
from the injected ``Clock`` as float epoch seconds.

Placement uses only *published* free GPUs and fits replica groups per node:
a group of ``nodes_per_replica`` nodes needs that many distinct nodes of a
matching flavor, each with ``gpus_per_replica / nodes_per_replica`` free GPUs.
Allocation is a guarded ``UPDATE ... WHERE state = 'free'`` checked by row
count, on top of the per-pool lock, so no GPU is ever handed out twice.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any

import sqlalchemy as sa

from gps_dagster.backends.sim import reserved, seam
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.context import Ctx
from gps_dagster.backends.sim.pure import choose_nodes, eligible
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.ports import Transient

_gr, _d = t.groups, t.deploys
# The placement path's statements, built once (bound as pool / b_*; see ``views``).
_PENDING = (
    sa.select(
        _gr.c.deploy,
        _gr.c.grp,
        _d.c.gpus_per_replica,
        _d.c.nodes_per_replica,
        _d.c.flavor,
        _d.c.node_selector,
    )
    .join(_d, sa.and_(_d.c.pool == _gr.c.pool, _d.c.id == _gr.c.deploy))
    .where(_gr.c.pool == sa.bindparam("pool"), _gr.c.state == "pending")
    .order_by(_d.c.ordinal, _gr.c.grp)
)
_STARTING = (
    _gr.update()
    .where(
        _gr.c.pool == sa.bindparam("b_pool"),
        _gr.c.deploy == sa.bindparam("b_deploy"),
        _gr.c.grp == sa.bindparam("b_grp"),
    )
    .values(state="starting", ready_at=sa.bindparam("b_ready_at"))
)
_WAITING = sa.exists().where(
    _gr.c.pool == sa.bindparam("b_pool"),
    _gr.c.deploy == sa.bindparam("b_deploy"),
    _gr.c.state == "pending",
)
_MARK_APPLIED = (
    _d.update()
    .where(
        _d.c.pool == sa.bindparam("b_pool"),
        _d.c.id == sa.bindparam("b_deploy"),
        _d.c.applied_generation != _d.c.generation,
        ~_WAITING,
    )
    .values(applied_generation=_d.c.generation)
    .returning(*_d.c)
)

__all__ = [
    "STORAGE",
    "Ctx",
    "advance",
    "allocate",
    "choose_nodes",
    "eligible",
    "free_by_node",
    "place_pending",
    "release",
]


def _scope(ctx: Ctx, among: Collection[str] | None) -> list[Any]:
    """Which GPUs a placement may consider: ``among``, else every GPU no reservation holds."""
    g = t.gpus
    if among is not None:
        return [g.c.uuid.in_(sorted(among))]
    return [g.c.uuid.not_in(sorted(ctx.ledger.reserved))] if ctx.ledger.reserved else []


def free_by_node(ctx: Ctx, among: Collection[str] | None = None) -> dict[str, int]:
    """Published free GPUs per node (nodes with none omitted), outside reservations unless
    ``among``."""
    if among is None and ctx.free is not None:
        return dict(ctx.free)
    g = t.gpus
    rows = ctx.conn.execute(
        sa.select(g.c.node, sa.func.count())
        .where(g.c.pool == ctx.pool, g.c.state == "free", *_scope(ctx, among))
        .group_by(g.c.node)
    )
    return {node: int(n) for node, n in rows}


def allocate(
    ctx: Ctx,
    node: str,
    count: int,
    holder: str,
    holder_type: str,
    grp: int | None,
    among: Collection[str] | None = None,
) -> None:
    """Hand ``count`` free GPUs of ``node`` (of ``among``, else unreserved) to ``holder``; refuse if
    any was taken meanwhile."""
    g = t.gpus
    # Two statements, not UPDATE ... WHERE uuid IN (SELECT ... LIMIT): planned on stale
    # statistics (no GPU free when last analysed) that one walks every free GPU of the pool.
    uuids = [
        r[0]
        for r in ctx.conn.execute(
            sa.select(g.c.uuid)
            .where(g.c.pool == ctx.pool, g.c.node == node, g.c.state == "free", *_scope(ctx, among))
            .order_by(g.c.idx)
            .limit(count)
        )
    ]
    done = ctx.conn.execute(
        g.update()
        .where(g.c.pool == ctx.pool, g.c.uuid.in_(uuids), g.c.state == "free")
        .values(state="held", holder=holder, holder_type=holder_type, grp=grp, until=None)
    ).rowcount
    if len(uuids) != count or done != count:
        raise Transient(f"GPUs on {node} were taken concurrently", reason="concurrent_allocation")
    ctx.touched.add(holder)
    if ctx.free is not None and among is None:
        left = ctx.free.get(node, 0) - count
        if left > 0:
            ctx.free[node] = left
        else:
            ctx.free.pop(node, None)


def release(ctx: Ctx, holder: str, grps: Iterable[int] | None = None) -> int:
    """Put the holder's GPUs (of the given groups) into their termination grace period."""
    g = t.gpus
    cond = [g.c.pool == ctx.pool, g.c.holder == holder, g.c.state == "held"]
    if grps is not None:
        cond.append(g.c.grp.in_(list(grps)))
    ctx.touched.add(holder)
    return int(
        ctx.conn.execute(
            g.update()
            .where(*cond)
            .values(state="terminating", until=ctx.now + ctx.timings.stop_grace_s)
        ).rowcount
    )


def place_pending(ctx: Ctx, blocked: set[str], never_ready: set[str]) -> set[str]:
    """Try to place every pending replica group, in deploy order; the deploys placed."""
    pending = ctx.conn.execute(_PENDING, {"pool": ctx.pool}).all()
    if not pending:
        return set()
    free = free_by_node(ctx)
    placed: set[str] = set()
    misplace = ctx.faulted("misplace")
    for dep, grp, gpr, npr, flavor, selector in pending:
        if dep in blocked:
            continue
        binding = ctx.bindings.get(dep)
        if binding is not None:
            if not _place_bound(ctx, dep, grp, gpr, flavor, binding, dep in misplace):
                continue
            free = free_by_node(ctx)
        else:
            per_node = gpr // npr
            chosen = choose_nodes(ctx, free, flavor, per_node, npr, json.loads(selector))
            if chosen is None:
                continue
            for node in chosen:
                allocate(ctx, node, per_node, dep, "deploy", grp)
                free[node] -= per_node
        ready_at = None if dep in never_ready else ctx.now + ctx.timings.start_delay_s
        ctx.conn.execute(
            _STARTING, {"b_pool": ctx.pool, "b_deploy": dep, "b_grp": grp, "b_ready_at": ready_at}
        )
        placed.add(dep)
    for dep in placed:
        mark_applied_if_placed(ctx, dep)
    ctx.touched |= placed
    return placed


def _place_bound(
    ctx: Ctx,
    dep: str,
    grp: int,
    gpr: int,
    flavor: str | None,
    binding: reserved.Binding,
    misplaced: bool,
) -> bool:
    """A bound replica: on its reservations' GPUs only (R-GPS-2), whole on one reservation."""
    if isinstance(binding, TimeSlicedBinding):
        return reserved.attach_member(ctx, dep, binding, misplaced)
    best: tuple[int, int, str, frozenset[str]] | None = None
    for among in reserved.exclusive_choices(ctx, binding, misplaced):
        chosen = choose_nodes(ctx, free_by_node(ctx, among), flavor, gpr, 1)
        if chosen:
            n = free_by_node(ctx, among)[chosen[0]]
            key = (n, ctx.ordinals[chosen[0]], chosen[0], among)
            best = key if best is None or key[:2] < best[:2] else best
    if best is None:
        return False
    allocate(ctx, best[2], gpr, dep, "deploy", grp, among=best[3])
    return True


def mark_applied_if_placed(ctx: Ctx, dep: str) -> None:
    """The controller applied the spec once no group of the deploy is pending (one statement)."""
    row = ctx.conn.execute(_MARK_APPLIED, {"b_pool": ctx.pool, "b_deploy": dep}).first()
    if row is not None:
        ctx.rows[dep] = row


def grab_for_intruders(ctx: Ctx) -> None:
    """Intruders take published GPUs the moment they appear (reproduces capacity_unavailable)."""
    f, g = t.foreign, t.gpus
    intruders = ctx.conn.execute(
        sa.select(f.c.id, f.c.gpus, f.c.flavor)
        .where(f.c.pool == ctx.pool, f.c.kind == "intruder")
        .order_by(f.c.id)
    ).all()
    for fid, want, flavor in intruders:
        held = ctx.conn.execute(
            sa.select(sa.func.count()).where(
                g.c.pool == ctx.pool, g.c.holder == fid, g.c.state == "held"
            )
        ).scalar_one()
        need = int(want) - int(held)
        for node, n in sorted(free_by_node(ctx).items(), key=lambda kv: ctx.ordinals[kv[0]]):
            if need <= 0:
                break
            if flavor is not None and ctx.flavors[node] != flavor:
                continue
            take = min(n, need)
            allocate(ctx, node, take, fid, "foreign", None)
            need -= take
            ctx.touched.add(fid)


def _apply_due(ctx: Ctx, at: float, blocked: set[str], never_ready: set[str]) -> None:
    g, gr = t.gpus, t.groups
    ctx.now = at
    ctx.conn.execute(
        g.update()
        .where(g.c.pool == ctx.pool, g.c.state == "terminating", g.c.until <= at)
        .values(
            state="unpublished",
            holder=None,
            holder_type=None,
            grp=None,
            until=g.c.until + ctx.timings.publish_lag_s,
        )
    )
    published = ctx.conn.execute(
        g.update()
        .where(g.c.pool == ctx.pool, g.c.state == "unpublished", g.c.until <= at)
        .values(state="free", until=None)
    ).rowcount
    became_ready = ctx.conn.execute(
        gr.update()
        .where(gr.c.pool == ctx.pool, gr.c.state == "starting", gr.c.ready_at <= at)
        .values(state="ready", ready_at=None)
    ).rowcount
    if became_ready and ctx.ledger.rsvs:
        reserved.sync_holders(ctx)  # a member is ready again: its holder can go
    if published:
        grab_for_intruders(ctx)
        place_pending(ctx, blocked, never_ready)
    record_usage(ctx)


def next_event(ctx: Ctx) -> float | None:
    g, gr = t.gpus, t.groups
    a = ctx.conn.execute(sa.select(sa.func.min(g.c.until)).where(g.c.pool == ctx.pool)).scalar_one()
    b = ctx.conn.execute(
        sa.select(sa.func.min(gr.c.ready_at)).where(gr.c.pool == ctx.pool)
    ).scalar_one()
    found = [float(x) for x in (a, b) if x is not None]
    return min(found) if found else None


def save_next_event(ctx: Ctx) -> float | None:
    nxt = next_event(ctx)
    ctx.conn.execute(t.pools.update().where(t.pools.c.name == ctx.pool).values(next_event_at=nxt))
    return nxt


def advance(
    ctx: Ctx, target: float, next_at: float | None, blocked: set[str], never_ready: set[str]
) -> None:
    """Apply every transition due up to ``target``, batch by batch, in time order."""
    seam.advance(STORAGE, ctx, target, next_at, blocked, never_ready)


class _Storage:
    """The SQL pool's side of ``seam.Timed`` and ``seam.Placing``: the pool's tables."""

    def next_event(self, ctx: Ctx) -> float | None:
        return next_event(ctx)

    def apply_due(self, ctx: Ctx, at: float, blocked: set[str], never_ready: set[str]) -> None:
        _apply_due(ctx, at, blocked, never_ready)

    def set_clock(self, ctx: Ctx, target: float, next_at: float | None, *, moved: bool) -> None:
        ctx.now = target
        values: dict[str, object] = {"clock_at": target}
        if moved:
            values["next_event_at"] = next_at
        ctx.conn.execute(t.pools.update().where(t.pools.c.name == ctx.pool).values(**values))

    def free_by_node(self, ctx: Ctx) -> dict[str, int]:
        return free_by_node(ctx)

    def allocate(
        self, ctx: Ctx, node: str, count: int, holder: str, holder_type: str, grp: int | None
    ) -> None:
        allocate(ctx, node, count, holder, holder_type, grp)


STORAGE = _Storage()


def usage_now(ctx: Ctx, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """GPUs held per holder and GPU totals by state.

    With the previous point, only the holders touched since are recounted:
    holdings change only through ``allocate`` and ``release``, which mark them.
    """
    g = t.gpus
    in_use: dict[str, int]
    if previous is None:
        in_use = {}
        rows = ctx.conn.execute(
            sa.select(g.c.holder, sa.func.count())
            .where(g.c.pool == ctx.pool, g.c.state == "held")
            .group_by(g.c.holder)
        )
    else:
        in_use = {h: n for h, n in previous["in_use"].items() if h not in ctx.touched}
        rows = ctx.conn.execute(
            sa.select(g.c.holder, sa.func.count())
            .where(g.c.pool == ctx.pool, g.c.state == "held", g.c.holder.in_(sorted(ctx.touched)))
            .group_by(g.c.holder)
        )
    in_use.update({str(h): int(n) for h, n in rows})
    totals = {"terminating": 0, "unpublished": 0, "free": 0}
    for state, n in ctx.conn.execute(
        sa.select(g.c.state, sa.func.count())
        .where(g.c.pool == ctx.pool, g.c.state.in_(sorted(totals)))
        .group_by(g.c.state)
    ):
        totals[str(state)] = int(n)
    out: dict[str, Any] = {"in_use": dict(sorted(in_use.items())), **totals}
    if ctx.bindings or ctx.ledger.rsvs:
        shared = reserved.shared_usage(ctx)
        if shared:
            out["shared"] = shared
    return out


def record_usage(ctx: Ctx) -> None:
    """Append a usage point at ``ctx.now`` when the GPU picture changed."""
    if not ctx.record_usage:
        return
    u = t.usage
    last = ctx.conn.execute(
        sa.select(u.c.at, u.c.data).where(u.c.pool == ctx.pool).order_by(u.c.id.desc()).limit(1)
    ).first()
    data = json.dumps(
        usage_now(ctx, None if last is None else json.loads(last.data)), sort_keys=True
    )
    ctx.touched.clear()
    if last is not None and last.data == data:
        return
    ctx.conn.execute(u.insert().values(pool=ctx.pool, at=ctx.now, data=data))
