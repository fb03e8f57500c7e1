"""What stop, start and set_replica_intent do to the pool, inside one locked transaction.

Admission runs here, as in a real control plane: billing and project quota
on start and scale-up, alias consent on stop, scale support by deploy kind,
and the VRAM budget of a time-sliced reservation (``reserved.admit_start``),
which manual starts go through too. Quota counts a reservation's GPUs once
and its bound deploys none (R-GPS-8).
Each function returns whether the call only persisted intent (a STOPPED
deploy, R-SCALE-5) and whether it changed anything at all; the caller records
the operation and bumps the ETag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from gps_dagster.backends.sim import reserved
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.dynamics import Ctx, mark_applied_if_placed, place_pending, release
from gps_dagster.backends.sim.pure import refuse_forced, reservation_of
from gps_dagster.domain.gps.billing import Workload, quota_usage, reservation_project
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.domain.kinds import DeployKind, scale_refusal
from gps_dagster.ports import (
    AdmissionRefused,
    BillingRefused,
    Permanent,
    QuotaRefused,
    QuotaStatus,
    Unsupported,
)


@dataclass(frozen=True)
class Outcome:
    changed: bool
    persist_only: bool = False


@dataclass(frozen=True)
class Blocks:
    """Persistent faults in force for this transaction."""

    unschedulable: set[str]
    never_ready: set[str]
    fail_start: set[str]
    fail_stop: set[str]


def _bump(ctx: Ctx, row: Row[Any], *, applied: bool, **values: object) -> None:
    d = t.deploys
    gen = row.generation + 1
    values.update(version=row.version + 1, generation=gen)
    if applied:
        values["applied_generation"] = gen
    query = d.update().where(d.c.pool == ctx.pool, d.c.id == row.id).values(**values)
    ctx.rows[row.id] = ctx.conn.execute(query.returning(*d.c)).one()  # the row as now written
    ctx.touched.add(row.id)


def stop(ctx: Ctx, row: Row[Any], *, allow_aliased_downtime: bool, blocks: Blocks) -> Outcome:
    if row.id in blocks.fail_stop:
        raise Permanent(f"stop of {row.id} failed", reason="stop_failed")
    if row.forced_state == "DELETING":
        raise AdmissionRefused("deploy_deleting", f"{row.id} is being deleted")
    if json.loads(row.aliases) and not allow_aliased_downtime:
        raise AdmissionRefused(
            "alias_requires_consent", f"{row.id} has an alias; pass allow_aliased_downtime=True"
        )
    if not row.running:
        return Outcome(changed=False)
    release(ctx, row.id)
    gr = t.groups
    ctx.conn.execute(gr.delete().where(gr.c.pool == ctx.pool, gr.c.deploy == row.id))
    if isinstance(ctx.bindings.get(row.id), TimeSlicedBinding):
        reserved.detach_member(ctx, row.id)
        reserved.sync_holders(
            ctx
        )  # the holder arrives in the same transaction the last member leaves
    _bump(ctx, row, applied=True, running=False)
    return Outcome(changed=True)


def start(ctx: Ctx, row: Row[Any], *, blocks: Blocks) -> Outcome:
    if row.id in blocks.fail_start:
        raise Permanent(f"start of {row.id} failed", reason="start_failed")
    refuse_forced(row)
    check_billing(ctx, row)
    if row.running:
        return Outcome(changed=False)
    check_quota(ctx, row, delta_replicas=row.desired)
    reserved.admit_start(ctx, row)
    _add_groups(ctx, row, row.next_grp, row.desired)
    _bump(ctx, row, applied=False, running=True, next_grp=row.next_grp + row.desired)
    _place(ctx, row.id, blocks)
    return Outcome(changed=True)


def set_replica_intent(ctx: Ctx, row: Row[Any], replicas: int, *, blocks: Blocks) -> Outcome:
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
    roles = {"desired": replicas, "role_min": replicas, "role_max": replicas}
    if not row.running:
        _bump(ctx, row, applied=True, **roles)
        return Outcome(changed=True, persist_only=True)
    delta = replicas - row.desired
    if delta > 0:
        check_billing(ctx, row)
        check_quota(ctx, row, delta_replicas=delta)
        _add_groups(ctx, row, row.next_grp, delta)
        _bump(ctx, row, applied=False, next_grp=row.next_grp + delta, **roles)
        _place(ctx, row.id, blocks)
    else:
        _remove_groups(ctx, row, -delta)
        _bump(ctx, row, applied=True, **roles)
    return Outcome(changed=True)


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
