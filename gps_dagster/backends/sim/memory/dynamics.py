"""How the in-memory pool moves through time: ``backends.sim.dynamics`` on records.

The same rules, in the same order, as the SQL pool: termination, publishing,
intruders, placement (best fit on published free GPUs, reservation-aware), readiness,
the next event and the usage history. Each function mirrors the one of the same
name there; the choices themselves are the shared pure ones (``backends.sim.pure``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from gps_dagster.backends.sim import seam
from gps_dagster.backends.sim.memory import reserved
from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.state import DeployRec, GpuRec
from gps_dagster.backends.sim.pure import Binding, choose_nodes, names
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.ports import Transient

__all__ = [
    "STORAGE",
    "MemCtx",
    "advance",
    "allocate",
    "free_by_node",
    "grab_for_intruders",
    "mark_applied_if_placed",
    "next_event",
    "place_pending",
    "record_usage",
    "release",
    "save_next_event",
    "terminate",
]


def _in_scope(ctx: MemCtx, uuid: str, among: Collection[str] | None) -> bool:
    return uuid in among if among is not None else uuid not in ctx.ledger.reserved


def free_by_node(ctx: MemCtx, among: Collection[str] | None = None) -> dict[str, int]:
    """Published free GPUs per node (nodes with none omitted, by node name), outside reservations
    unless ``among``."""
    out: dict[str, int] = {}
    if not ctx.state.free_on:
        return out  # a full pool: no need to read the ledger
    reserved_ = ctx.ledger.reserved if among is None else None
    for node, free in sorted(ctx.state.free_on.items()):
        if among is not None:
            n = sum(1 for u in free if u in among)
        else:
            n = len(free) - (sum(1 for u in free if u in reserved_) if reserved_ else 0)
        if n:
            out[node] = n
    return out


def allocate(
    ctx: MemCtx,
    node: str,
    count: int,
    holder: str,
    holder_type: str,
    grp: int | None,
    among: Collection[str] | None = None,
) -> None:
    """Hand ``count`` free GPUs of ``node`` (lowest index first) to ``holder``."""
    st = ctx.state
    free = [st.gpus[u] for u in st.free_on.get(node, ()) if _in_scope(ctx, u, among)]
    chosen = sorted(free, key=lambda g: g.idx)[:count]
    if len(chosen) != count:
        raise Transient(f"GPUs on {node} were taken concurrently", reason="concurrent_allocation")
    for g in chosen:
        st.set_gpu(g, "held", holder=holder, holder_type=holder_type, grp=grp, until=None)


def release(ctx: MemCtx, holder: str, grps: Iterable[int] | None = None) -> int:
    """Put the holder's GPUs (of the given groups) into their termination grace period."""
    among = None if grps is None else set(grps)
    done = 0
    for g in ctx.state.of_holder(holder):
        if g.state == "held" and (among is None or g.grp in among):
            terminate(ctx, g)
            done += 1
    return done


def terminate(ctx: MemCtx, g: GpuRec) -> None:
    """A held GPU's pod enters its termination grace period."""
    ctx.state.set_gpu(
        g,
        "terminating",
        holder=g.holder,
        holder_type=g.holder_type,
        grp=g.grp,
        until=ctx.now + ctx.timings.stop_grace_s,
    )


def place_pending(ctx: MemCtx, blocked: set[str], never_ready: set[str]) -> set[str]:
    """Try to place every pending replica group, in deploy order; the deploys placed."""
    st = ctx.state
    order = sorted(st.pending, key=lambda k: (st.deploys[k[0]].ordinal, k[1]))
    pending = [(st.deploys[d], st.groups[d][grp]) for d, grp in order]
    if not pending:
        return set()
    free = free_by_node(ctx)
    placed: set[str] = set()
    misplace = ctx.faulted("misplace")
    for dep, group in pending:
        if dep.id in blocked:
            continue
        binding = ctx.bindings.get(dep.id)
        if binding is not None:
            if not _place_bound(ctx, dep, group.grp, binding, dep.id in misplace):
                continue
            free = free_by_node(ctx)
        else:
            per_node = dep.gpus_per_replica // dep.nodes_per_replica
            chosen = choose_nodes(
                ctx, free, dep.flavor, per_node, dep.nodes_per_replica, names(dep.node_selector)
            )
            if chosen is None:
                continue
            for node in chosen:
                allocate(ctx, node, per_node, dep.id, "deploy", group.grp)
                free[node] -= per_node
        st.set_group(
            group,
            "starting",
            None if dep.id in never_ready else ctx.now + ctx.timings.start_delay_s,
        )
        placed.add(dep.id)
    for dep_id in placed:
        mark_applied_if_placed(ctx, st.deploys[dep_id])
    return placed


def _place_bound(ctx: MemCtx, dep: DeployRec, grp: int, binding: Binding, misplaced: bool) -> bool:
    """A bound replica: on its reservations' GPUs only (R-GPS-2), whole on one reservation."""
    if isinstance(binding, TimeSlicedBinding):
        return reserved.attach_member(ctx, dep.id, binding, misplaced)
    gpr = dep.gpus_per_replica
    best: tuple[int, int, str, frozenset[str]] | None = None
    for among in reserved.exclusive_choices(ctx, binding, misplaced):
        free = free_by_node(ctx, among)
        chosen = choose_nodes(ctx, free, dep.flavor, gpr, 1)
        if chosen:
            key = (free[chosen[0]], ctx.ordinals[chosen[0]], chosen[0], among)
            best = key if best is None or key[:2] < best[:2] else best
    if best is None:
        return False
    allocate(ctx, best[2], gpr, dep.id, "deploy", grp, among=best[3])
    return True


def mark_applied_if_placed(ctx: MemCtx, dep: DeployRec) -> None:
    """The controller applied the spec once no group of the deploy is pending."""
    if dep.applied_generation != dep.generation and not any(
        g.state == "pending" for g in ctx.state.groups[dep.id].values()
    ):
        dep.applied_generation = dep.generation


def grab_for_intruders(ctx: MemCtx) -> None:
    """Intruders take published GPUs the moment they appear (reproduces capacity_unavailable)."""
    st = ctx.state
    for fid in sorted(st.foreign):
        fw = st.foreign[fid]
        if fw.kind != "intruder":
            continue
        need = fw.gpus - st.held_count.get(fid, 0)
        for node, n in sorted(free_by_node(ctx).items(), key=lambda kv: ctx.ordinals[kv[0]]):
            if need <= 0:
                break
            if fw.flavor is not None and ctx.flavors[node] != fw.flavor:
                continue
            take = min(n, need)
            allocate(ctx, node, take, fid, "foreign", None)
            need -= take


def _apply_due(ctx: MemCtx, at: float, blocked: set[str], never_ready: set[str]) -> None:
    st = ctx.state
    ctx.now = at
    due = [st.gpus[u] for u in st.timed]
    for g in due:
        if g.state == "terminating" and g.until is not None and g.until <= at:
            st.set_gpu(
                g,
                "unpublished",
                holder=None,
                holder_type=None,
                grp=None,
                until=g.until + ctx.timings.publish_lag_s,
            )
    published = 0
    for g in due:
        if g.state == "unpublished" and g.until is not None and g.until <= at:
            st.set_gpu(g, "free", holder=None, holder_type=None, grp=None, until=None)
            published += 1
    became_ready = 0
    for gr in list(st.timed_groups.values()):
        if gr.state == "starting" and gr.ready_at is not None and gr.ready_at <= at:
            st.set_group(gr, "ready", None)
            became_ready += 1
    if became_ready and ctx.ledger.rsvs:
        reserved.sync_holders(ctx)  # a member is ready again: its holder can go
    if published:
        grab_for_intruders(ctx)
        place_pending(ctx, blocked, never_ready)
    record_usage(ctx)


def next_event(ctx: MemCtx) -> float | None:
    st = ctx.state
    found = [until for u in st.timed if (until := st.gpus[u].until) is not None]
    found += [ready_at for gr in st.timed_groups.values() if (ready_at := gr.ready_at) is not None]
    return min(found) if found else None


def save_next_event(ctx: MemCtx) -> float | None:
    ctx.state.next_event_at = nxt = next_event(ctx)
    return nxt


def advance(
    ctx: MemCtx, target: float, next_at: float | None, blocked: set[str], never_ready: set[str]
) -> None:
    """Apply every transition due up to ``target``, batch by batch, in time order."""
    seam.advance(STORAGE, ctx, target, next_at, blocked, never_ready)


class _Storage:
    """The in-memory pool's side of ``seam.Timed`` and ``seam.Placing``: its state's dicts."""

    def next_event(self, ctx: MemCtx) -> float | None:
        return next_event(ctx)

    def apply_due(self, ctx: MemCtx, at: float, blocked: set[str], never_ready: set[str]) -> None:
        _apply_due(ctx, at, blocked, never_ready)

    def set_clock(self, ctx: MemCtx, target: float, next_at: float | None, *, moved: bool) -> None:
        ctx.now = target
        ctx.state.clock_at = target
        if moved:
            ctx.state.next_event_at = next_at

    def free_by_node(self, ctx: MemCtx) -> dict[str, int]:
        return free_by_node(ctx)

    def allocate(
        self, ctx: MemCtx, node: str, count: int, holder: str, holder_type: str, grp: int | None
    ) -> None:
        allocate(ctx, node, count, holder, holder_type, grp)


STORAGE = _Storage()


def usage_now(ctx: MemCtx) -> dict[str, Any]:
    """GPUs held per holder and GPU totals by state (``sim.dynamics.usage_now``'s picture)."""
    st = ctx.state
    in_use = dict(sorted(st.held_count.items()))
    totals = {s: st.in_state.get(s, 0) for s in ("terminating", "unpublished", "free")}
    out: dict[str, Any] = {"in_use": in_use, **totals}
    if ctx.bindings or ctx.ledger.rsvs:
        shared = reserved.shared_usage(ctx)
        if shared:
            out["shared"] = shared
    return out


def record_usage(ctx: MemCtx) -> None:
    """Append a usage point at ``ctx.now`` when the GPU picture changed."""
    if not ctx.record_usage:
        return
    data = usage_now(ctx)
    usage = ctx.state.usage
    if usage and usage[-1][1] == data:
        return
    usage.append((ctx.now, data))
