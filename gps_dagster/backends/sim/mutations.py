"""What stop, start and set_replica_intent do to the pool's tables, inside one locked transaction.

The steps of each call are ``seam.stop`` / ``seam.start`` / ``seam.set_replica_intent``; this
module is their SQL side (``DEPLOYS``: the deploy and group rows) and the admission that reads
the pool, as in a real control plane: billing and project quota on start and scale-up, and the
VRAM budget of a time-sliced reservation (``reserved.admit_start``), which manual starts go
through too. Quota counts a reservation's GPUs once and its bound deploys none (R-GPS-8).
Each call returns whether it only persisted intent (a STOPPED deploy, R-SCALE-5) and whether it
changed anything at all; the caller records the operation and bumps the ETag.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from gps_dagster.backends.sim import reserved
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.dynamics import Ctx, mark_applied_if_placed, place_pending, release
from gps_dagster.backends.sim.pure import (
    Binding,
    Blocks,
    reservation_of,
)
from gps_dagster.domain.gps.billing import Workload, quota_usage, reservation_project
from gps_dagster.ports import (
    BillingRefused,
    QuotaRefused,
    QuotaStatus,
)


def _bump(ctx: Ctx, row: Row[Any], *, applied: bool, **values: object) -> None:
    d = t.deploys
    gen = row.generation + 1
    values.update(version=row.version + 1, generation=gen)
    if applied:
        values["applied_generation"] = gen
    query = d.update().where(d.c.pool == ctx.pool, d.c.id == row.id).values(**values)
    ctx.rows[row.id] = ctx.conn.execute(query.returning(*d.c)).one()  # the row as now written
    ctx.touched.add(row.id)


class _Deploys:
    """The SQL pool's side of ``seam.Deploys``: the deploy and group rows."""

    def binding(self, ctx: Ctx, deploy_id: str) -> Binding | None:
        return ctx.bindings.get(deploy_id)

    def write(self, ctx: Ctx, row: Row[Any], *, applied: bool, **values: object) -> None:
        _bump(ctx, row, applied=applied, **values)

    def add_groups(self, ctx: Ctx, row: Row[Any], first: int, count: int) -> None:
        _add_groups(ctx, row, first, count)

    def remove_groups(self, ctx: Ctx, row: Row[Any], count: int) -> None:
        _remove_groups(ctx, row, count)

    def remove_all_groups(self, ctx: Ctx, row: Row[Any]) -> None:
        release(ctx, row.id)
        gr = t.groups
        ctx.conn.execute(gr.delete().where(gr.c.pool == ctx.pool, gr.c.deploy == row.id))

    def place(self, ctx: Ctx, row: Row[Any], blocks: Blocks) -> None:
        _place(ctx, row.id, blocks)

    def check_billing(self, ctx: Ctx, row: Row[Any]) -> None:
        check_billing(ctx, row)

    def check_quota(self, ctx: Ctx, row: Row[Any], *, delta_replicas: int) -> QuotaStatus:
        return check_quota(ctx, row, delta_replicas=delta_replicas)

    def admit_start(self, ctx: Ctx, row: Row[Any]) -> None:
        reserved.admit_start(ctx, row)

    def detach_member(self, ctx: Ctx, deploy_id: str) -> None:
        reserved.detach_member(ctx, deploy_id)

    def sync_holders(self, ctx: Ctx) -> None:
        reserved.sync_holders(ctx)


DEPLOYS = _Deploys()


def _add_groups(ctx: Ctx, row: Row[Any], first: int, count: int) -> None:
    ctx.conn.execute(
        t.groups.insert(),
        [
            {
                "pool": ctx.pool,
                "deploy": row.id,
                "grp": first + i,
                "state": "pending",
                "ready_at": None,
            }
            for i in range(count)
        ],
    )


def _remove_groups(ctx: Ctx, row: Row[Any], count: int) -> None:
    """Scale down: pending groups go first, then the youngest."""
    if count <= 0:
        return
    gr = t.groups
    order = sa.case({"pending": 0, "starting": 1}, value=gr.c.state, else_=2)
    victims = [
        r[0]
        for r in ctx.conn.execute(
            sa.select(gr.c.grp)
            .where(gr.c.pool == ctx.pool, gr.c.deploy == row.id)
            .order_by(order, gr.c.grp.desc())
            .limit(count)
        )
    ]
    release(ctx, row.id, victims)
    ctx.conn.execute(
        gr.delete().where(gr.c.pool == ctx.pool, gr.c.deploy == row.id, gr.c.grp.in_(victims))
    )


def _place(ctx: Ctx, deploy_id: str, blocks: Blocks) -> None:
    if deploy_id not in place_pending(ctx, blocks.unschedulable, blocks.never_ready):
        mark_applied_if_placed(ctx, deploy_id)  # nothing to place (no group added) applies too


def check_billing(ctx: Ctx, row: Row[Any]) -> None:
    if row.project is None:
        return
    p = t.projects
    billing = ctx.conn.execute(
        sa.select(p.c.billing).where(p.c.pool == ctx.pool, p.c.name == row.project)
    ).scalar_one_or_none()
    if billing == "unpaid":
        raise BillingRefused(f"project {row.project} is unpaid", project=row.project)


def check_quota(ctx: Ctx, row: Row[Any], *, delta_replicas: int) -> QuotaStatus:
    """Project GPUs held (running deploys by their role ceiling; reservations once) + the request ≤
    quota.

    A deploy bound to one of the project's reservations requests no GPU: the
    reservation already counts them (R-GPS-8).
    """
    requested = max(delta_replicas, 0) * row.gpus_per_replica
    if row.project is None:
        return QuotaStatus(project=None, quota=None, used=0, requested=requested)
    p = t.projects
    quota = ctx.conn.execute(
        sa.select(p.c.gpu_quota).where(p.c.pool == ctx.pool, p.c.name == row.project)
    ).scalar_one_or_none()
    held = [r for r in ctx.ledger.rsvs.values() if reservation_project(r) == row.project]
    if reservation_of(ctx.bindings.get(row.id)) in {r.id for r in held}:
        requested = 0
    used = project_gpus(ctx, row.project, held)
    if quota is not None and used + requested > quota:
        raise QuotaRefused(
            f"project {row.project}: {used} GPUs held + {requested} requested > quota {quota}",
            project=row.project,
            quota=quota,
            used=used,
            requested=requested,
        )
    return QuotaStatus(project=row.project, quota=quota, used=used, requested=requested)


def project_gpus(ctx: Ctx, project: str, held: list[Any]) -> int:
    """GPUs a project holds: its reservations once, plus running deploys not bound to them."""
    d = t.deploys
    rows = ctx.conn.execute(
        sa.select(d.c.id, d.c.role_max, d.c.gpus_per_replica).where(
            d.c.pool == ctx.pool, d.c.project == project, d.c.running.is_(True)
        )
    )
    workloads = [
        Workload(i, int(n) * int(g), 0, 0, reservation_of(ctx.bindings.get(i))) for i, n, g in rows
    ]
    return quota_usage(held, workloads).gpus
