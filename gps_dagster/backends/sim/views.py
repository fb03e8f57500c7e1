"""Read models of the simulated pool: deploy views, operations, capacity previews.

Deploy state is derived from the rows (groups, GPUs) rather than stored, so
it can never disagree with them. Like a real controller that scales to zero,
a stopped deploy reports ``STOPPED`` as soon as the stop is applied while its
pods may still be terminating: ``terminating_pods`` is the evidence that its
GPUs are free, never the state alone (SPEC R-PASS-8).
"""

# Decisions embodied here (docs/decisions.md):
# * “The simulated pool reports STOPPED at once”

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from gps_dagster.backends.sim import reserved
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.dynamics import Ctx, choose_nodes, eligible
from gps_dagster.domain.fitting import groups_fitting
from gps_dagster.domain.kinds import DeployKind
from gps_dagster.ports import (
    CapacityPreview,
    DeployState,
    DeployView,
    Fits,
    Insufficient,
    Operation,
    OperationKind,
    OperationState,
)


def to_dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def etag_of(deploy_id: str, version: int) -> str:
    """Opaque, and never equal for two deploys (a wrong deploy's ETag is stale too)."""
    return f'W/"{deploy_id}.{version}"'


_d, _gr, _g = t.deploys, t.groups, t.gpus
# The hottest reads as statements built once: building one per call, and its cache key, cost
# about as much Python time as the round trip (bound as pool / deploy).
_DEPLOY_ROW = sa.select(_d).where(_d.c.pool == sa.bindparam("pool"), _d.c.id == sa.bindparam("deploy"))
_PODS = (
    sa.select(_g.c.grp, _g.c.node)
    .where(_g.c.pool == sa.bindparam("pool"), _g.c.holder == sa.bindparam("deploy"), _g.c.state == "terminating")
    .distinct()
    .subquery()
)
TERMINATING_PODS = "~terminating_pods"
"""Not a group state: the row of ``_COUNTS`` that counts terminating pods."""
_COUNTS = sa.union_all(
    sa.select(_gr.c.state, sa.func.count())
    .where(_gr.c.pool == sa.bindparam("pool"), _gr.c.deploy == sa.bindparam("deploy"))
    .group_by(_gr.c.state),
    sa.select(sa.literal(TERMINATING_PODS), sa.func.count()).select_from(_PODS),
)


@functools.lru_cache(maxsize=4096)
def names(document: str) -> tuple[str, ...]:
    """A JSON list of names (aliases, a node selector), parsed once per distinct text."""
    return tuple(json.loads(document))


def deploy_row(ctx: Ctx, deploy_id: str) -> Row[Any] | None:
    """The deploy's row, read once per transaction until it is written (``Ctx.rows``)."""
    row = ctx.rows.get(deploy_id)
    if row is None:
        row = ctx.conn.execute(_DEPLOY_ROW, {"pool": ctx.pool, "deploy": deploy_id}).first()
        if row is not None:
            ctx.rows[deploy_id] = row
    return row


def derive_state(row: Row[Any], counts: Mapping[str, int], terminating: int) -> DeployState:
    if row.forced_state:
        return DeployState(row.forced_state)
    if not row.running:
        return DeployState.STOPPED
    total = sum(counts.values())
    ready = counts.get("ready", 0)
    if ready == row.desired == total and row.applied_generation == row.generation:
        return DeployState.READY
    return DeployState.UPDATING if ready else DeployState.STARTING


def deploy_views(ctx: Ctx, rows: list[Row[Any]]) -> dict[str, DeployView]:
    """Views of many deploys with two aggregate queries instead of two per deploy."""
    ids = [r.id for r in rows]
    if not ids:
        return {}
    gr, g = t.groups, t.gpus
    counts: dict[str, dict[str, int]] = {i: {} for i in ids}
    for deploy, state, n in ctx.conn.execute(
        sa.select(gr.c.deploy, gr.c.state, sa.func.count())
        .where(gr.c.pool == ctx.pool, gr.c.deploy.in_(ids))
        .group_by(gr.c.deploy, gr.c.state)
    ):
        counts[deploy][str(state)] = int(n)
    inner = (
        sa.select(g.c.holder, g.c.grp, g.c.node)
        .where(g.c.pool == ctx.pool, g.c.holder.in_(ids), g.c.state == "terminating")
        .distinct()
        .subquery()
    )
    term = {h: int(n) for h, n in ctx.conn.execute(sa.select(inner.c.holder, sa.func.count()).group_by(inner.c.holder))}
    return {r.id: deploy_view(ctx, r, counts[r.id], term.get(r.id, 0)) for r in rows}


def _counts_and_terminating(ctx: Ctx, deploy_id: str) -> tuple[dict[str, int], int]:
    """A deploy's groups by state and its terminating pods, in one statement."""
    rows = ctx.conn.execute(_COUNTS, {"pool": ctx.pool, "deploy": deploy_id})
    counts = {str(s): int(n) for s, n in rows}
    return counts, counts.pop(TERMINATING_PODS, 0)


def deploy_view(
    ctx: Ctx, row: Row[Any], counts: dict[str, int] | None = None, term: int | None = None
) -> DeployView:
    if counts is None or term is None:
        counts, term = _counts_and_terminating(ctx, row.id)
    pending = counts.get("pending", 0)
    return DeployView(
        id=row.id,
        kind=DeployKind(row.kind),
        state=derive_state(row, counts, term),
        etag=etag_of(row.id, row.version),
        aliases=names(row.aliases),
        project=row.project,
        cmp_managed=row.project is not None,
        endpoint=row.endpoint,
        gpus_per_replica=row.gpus_per_replica,
        nodes_per_replica=row.nodes_per_replica,
        desired_replicas=row.desired,
        ready_replicas=counts.get("ready", 0),
        generation=row.generation,
        applied_generation=row.applied_generation,
        terminating_pods=term,
        unschedulable=bool(row.running and pending),
        hpa=bool(row.hpa),
        role_min=row.role_min,
        role_max=row.role_max,
        reservation=reserved.binding_view(ctx.bindings.get(row.id)),
    )


def operation_state(ctx: Ctx, op: Row[Any], view: DeployView, *, latest: bool = False) -> OperationState:
    """``latest``: ``op`` was recorded moments ago in this transaction (no later one exists)."""
    if op.state != OperationState.ACCEPTED:
        return OperationState(op.state)
    o = t.operations
    later = 0 if latest else ctx.conn.execute(
        sa.select(sa.func.count()).where(o.c.pool == ctx.pool, o.c.deploy == op.deploy, o.c.seq > op.seq)
    ).scalar_one()
    if later:
        return OperationState.SUPERSEDED
    if op.kind == OperationKind.STOP:
        done = view.converged_stopped
    else:
        done = (
            view.state is DeployState.READY
            and view.ready_replicas == view.desired_replicas
            and view.terminating_pods == 0
        )
    return OperationState.DONE if done else OperationState.ACCEPTED


def to_operation(op: Row[Any], state: OperationState) -> Operation:
    return Operation(
        id=op.id,
        deploy_id=op.deploy,
        kind=OperationKind(op.kind),
        idempotency_key=op.key,
        state=state,
        etag_after=op.etag_after,
        created_at=to_dt(op.created_at),
        replicas=op.replicas,
        persist_only=bool(op.persist_only),
    )


def preview(ctx: Ctx, row: Row[Any], free: Mapping[str, int], delta: int) -> CapacityPreview:
    """Fit ``delta`` whole replica groups on published free GPUs, node by node, per flavor.

    A reservation-bound deploy fits only within its reservations (``reserved.capacity``).
    """
    bound = reserved.capacity(ctx, row, delta)
    if bound is not None:
        return bound
    per_node = row.gpus_per_replica // row.nodes_per_replica
    npr = row.nodes_per_replica
    matching = eligible(ctx, free, row.flavor, names(row.node_selector))
    if row.flavor is not None and row.flavor not in set(ctx.flavors.values()):
        return Insufficient("no_matching_flavor", {}, delta, 0)
    by_flavor: dict[str, list[int]] = {}
    for node, f in matching.items():
        if f >= per_node:
            by_flavor.setdefault(ctx.flavors[node], []).append(f // per_node)
    fitting = sum(groups_fitting(slots, npr, delta) for slots in by_flavor.values())
    if fitting >= delta:
        return Fits(groups=delta)
    return Insufficient("insufficient_capacity", dict(sorted(matching.items())), delta, min(fitting, delta))


def take(ctx: Ctx, row: Row[Any], free: dict[str, int], delta: int) -> None:
    """Count ``delta`` groups of ``row`` as taken from ``free`` (a batch's fitting preview)."""
    per_node = row.gpus_per_replica // row.nodes_per_replica
    selector = names(row.node_selector)
    for _ in range(delta):
        nodes = choose_nodes(ctx, free, row.flavor, per_node, row.nodes_per_replica, selector)
        if not nodes:
            return
        for node in nodes:
            free[node] -= per_node
            if free[node] <= 0:
                del free[node]
