"""Loading a pool file (``PoolSpec``) into the simulator's tables, exactly once.

Deploys declared ``running`` and static foreign workloads are placed at load
time and are READY at once (the pool file describes a pool that is already
up). A pool whose running workloads do not fit is a user error, reported with
the field path like every other pool-file problem.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gps_dagster.backends.sim import faults, reserved, seam
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.dynamics import (
    STORAGE,
    Ctx,
    place_pending,
    record_usage,
    save_next_event,
)
from gps_dagster.backends.sim.ledger import Ledger
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.gps.bindings import binding_errors
from gps_dagster.domain.pool import PoolSpec


def exists(conn: Connection, name: str) -> bool:
    return conn.execute(sa.select(t.pools.c.name).where(t.pools.c.name == name)).first() is not None


def delete(conn: Connection, name: str) -> None:
    for table in (
        t.gpus,
        t.nodes,
        t.deploys,
        t.groups,
        t.projects,
        t.foreign,
        t.operations,
        t.faults,
        t.usage,
        t.bindings,
        t.shares,
    ):
        conn.execute(table.delete().where(table.c.pool == name))
    conn.execute(t.pools.delete().where(t.pools.c.name == name))


def load(conn: Connection, spec: PoolSpec, now: float, ledger: Ledger | None = None) -> None:
    """Insert the pool; the caller holds the transaction.

    ``ledger`` holds the reservations already in the store's ledger: bindings
    must name usable ones, and placement at load honours them like later on.
    """
    ledger = ledger or Ledger()
    check_bindings(spec, ledger)
    conn.execute(
        t.pools.insert().values(
            name=spec.name,
            revision=0,
            clock_at=now,
            next_event_at=None,
            op_seq=0,
            settings=spec.sim.model_dump_json(),
            spec=spec.model_dump_json(),
        )
    )
    _nodes(conn, spec)
    _deploys(conn, spec)
    reserved.save_bindings(conn, spec)
    for name, proj in spec.projects.items():
        conn.execute(
            t.projects.insert().values(
                pool=spec.name, name=name, gpu_quota=proj.gpu_quota, billing=proj.billing
            )
        )
    for fault in spec.sim.faults:
        faults.insert(conn, spec.name, fault)
    ctx = Ctx(
        conn=conn,
        pool=spec.name,
        timings=spec.sim.timings,
        flavors={n.name: n.flavor for n in spec.nodes},
        ordinals={n.name: i for i, n in enumerate(spec.nodes)},
        now=now,
        record_usage=spec.sim.record_usage,
        ledger=ledger,
        bindings={d.id: b for d in spec.deploys if (b := d.binding()) is not None},
    )
    _foreign(ctx, spec)
    _place_running(ctx, spec)
    if ledger.rsvs:
        reserved.sync_holders(ctx)
    save_next_event(ctx)
    record_usage(ctx)


def check_bindings(spec: PoolSpec, ledger: Ledger) -> None:
    """Every binding names reservations the ledger holds on this pool, in the right mode."""
    problems = [
        e
        for i, d in enumerate(spec.deploys)
        if (b := d.binding()) is not None
        for e in binding_errors(b, ledger.rsvs, path=f"deploys[{i}].reservation")
    ]
    if problems:
        raise SpecInvalid(problems, source=spec.name)


def _nodes(conn: Connection, spec: PoolSpec) -> None:
    gpu_rows = []
    for i, node in enumerate(spec.nodes):
        conn.execute(
            t.nodes.insert().values(
                pool=spec.name,
                name=node.name,
                ordinal=i,
                flavor=node.flavor,
                region=node.region,
                gpus=node.gpus,
            )
        )
        for idx, uuid in enumerate(spec.uuids(node)):
            gpu_rows.append(
                {"pool": spec.name, "uuid": uuid, "node": node.name, "idx": idx, "state": "free"}
            )
    conn.execute(t.gpus.insert(), gpu_rows)


def _deploys(conn: Connection, spec: PoolSpec) -> None:
    rows = [
        {
            "pool": spec.name,
            "id": d.id,
            "ordinal": i,
            "kind": d.kind.value,
            "project": d.project,
            "endpoint": d.endpoint,
            "flavor": d.flavor,
            "hpa": d.hpa,
            "node_selector": json.dumps(list(d.node_selector)),
            "aliases": json.dumps(list(d.aliases)),
            "gpus_per_replica": d.gpus_per_replica,
            "nodes_per_replica": d.nodes_per_replica,
            "desired": d.replicas,
            "role_min": d.replicas,
            "role_max": d.replicas,
            "running": d.state == "running",
            "forced_state": None,
            "version": 1,
            "generation": 1,
            "applied_generation": 1,
            "next_grp": d.replicas if d.state == "running" else 0,
        }
        for i, d in enumerate(spec.deploys)
    ]
    if rows:
        conn.execute(t.deploys.insert(), rows)
    groups = [
        {"pool": spec.name, "deploy": d.id, "grp": g, "state": "pending", "ready_at": None}
        for d in spec.deploys
        if d.state == "running"
        for g in range(d.replicas)
    ]
    if groups:
        conn.execute(t.groups.insert(), groups)


def _foreign(ctx: Ctx, spec: PoolSpec) -> None:
    problems = []
    for i, fw in enumerate(spec.sim.foreign):
        ctx.conn.execute(
            t.foreign.insert().values(
                pool=spec.name, id=fw.id, kind=fw.kind, gpus=fw.gpus, flavor=fw.flavor
            )
        )
        if fw.kind != "static":
            continue
        problem = seam.place_static_foreign(STORAGE, ctx, i, fw)
        if problem is not None:
            problems.append(problem)
    if problems:
        raise SpecInvalid(problems, source=spec.name)


def _place_running(ctx: Ctx, spec: PoolSpec) -> None:
    place_pending(ctx, blocked=set(), never_ready=set())
    gr = t.groups
    ctx.conn.execute(
        gr.update()
        .where(gr.c.pool == spec.name, gr.c.state == "starting")
        .values(state="ready", ready_at=None)
    )
    stuck = {
        r[0]
        for r in ctx.conn.execute(
            sa.select(gr.c.deploy).where(gr.c.pool == spec.name, gr.c.state == "pending")
        )
    }
    if stuck:
        raise SpecInvalid(
            [
                FieldError(
                    f"deploys[{i}].state",
                    "initial_overcommit",
                    f"running '{d.id}' does not fit the pool; stop it or add GPUs",
                )
                for i, d in enumerate(spec.deploys)
                if d.id in stuck
            ],
            source=spec.name,
        )
