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

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from gps_dagster.backends.sim import reserved
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.dynamics import Ctx
from gps_dagster.backends.sim.pure import (
    derive_state,
    etag_of,
    names,
    settled_state,
    take,
    to_dt,
    to_operation,
    unbound_preview,
    view_of,
)
from gps_dagster.ports import CapacityPreview, DeployView, OperationState

__all__ = [
    "deploy_row",
    "deploy_view",
    "deploy_views",
    "derive_state",
    "etag_of",
    "names",
    "operation_state",
    "preview",
    "take",
    "to_dt",
    "to_operation",
]

_d, _gr, _g = t.deploys, t.groups, t.gpus
# The hottest reads as statements built once: building one per call, and its cache key, cost
# about as much Python time as the round trip (bound as pool / deploy).
_DEPLOY_ROW = sa.select(_d).where(
    _d.c.pool == sa.bindparam("pool"), _d.c.id == sa.bindparam("deploy")
)
_PODS = (
    sa.select(_g.c.grp, _g.c.node)
    .where(
        _g.c.pool == sa.bindparam("pool"),
        _g.c.holder == sa.bindparam("deploy"),
        _g.c.state == "terminating",
    )
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


def deploy_row(ctx: Ctx, deploy_id: str) -> Row[Any] | None:
    """The deploy's row, read once per transaction until it is written (``Ctx.rows``)."""
    row = ctx.rows.get(deploy_id)
    if row is None:
        row = ctx.conn.execute(_DEPLOY_ROW, {"pool": ctx.pool, "deploy": deploy_id}).first()
        if row is not None:
            ctx.rows[deploy_id] = row
    return row


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
    term = {
        h: int(n)
        for h, n in ctx.conn.execute(
            sa.select(inner.c.holder, sa.func.count()).group_by(inner.c.holder)
        )
    }
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
    return view_of(row, counts, term, ctx.bindings.get(row.id))


def operation_state(
    ctx: Ctx, op: Row[Any], view: DeployView, *, latest: bool = False
) -> OperationState:
    """``latest``: ``op`` was recorded moments ago in this transaction (no later one exists)."""
    if op.state != OperationState.ACCEPTED:
        return OperationState(op.state)
    o = t.operations
    later = (
        0
        if latest
        else ctx.conn.execute(
            sa.select(sa.func.count()).where(
                o.c.pool == ctx.pool, o.c.deploy == op.deploy, o.c.seq > op.seq
            )
        ).scalar_one()
    )
    return settled_state(op, view, superseded=bool(later))


def preview(ctx: Ctx, row: Row[Any], free: Mapping[str, int], delta: int) -> CapacityPreview:
    """Fit ``delta`` whole replica groups on published free GPUs, node by node, per flavor.

    A reservation-bound deploy fits only within its reservations (``reserved.capacity``).
    """
    bound = reserved.capacity(ctx, row, delta)
    if bound is not None:
        return bound
    return unbound_preview(ctx, row, free, delta)
