"""The simulator's driver surface: stepping time, faults, foreign workloads, history.

None of this is part of the ``Core`` port: a Kubernetes cluster has no
"advance time" button. A simulation driver (the ``simulate`` report, the demo,
tests) moves a ``VirtualClock`` and calls ``settle()``; it injects faults and
foreign workloads; it reads the usage history (GPUs per holder over time) and
the operation log (every accepted mutation, for exactly-once proofs).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gps_dagster.backends.sim import faults, views
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.dynamics import (
    Ctx,
    allocate,
    choose_nodes,
    free_by_node,
    grab_for_intruders,
    place_pending,
    release,
)
from gps_dagster.domain.pool import FaultSpec, fault_problem
from gps_dagster.ports import AdmissionRefused, DeployView, NotFound, Operation, OperationState

if TYPE_CHECKING:
    from gps_dagster.backends.sim.pure import Blocks


@dataclass(frozen=True, slots=True)
class UsagePoint:
    """The GPU picture from ``at`` until the next point."""

    at: datetime
    in_use: dict[str, int]
    """GPUs held per deploy or foreign workload."""
    terminating: int
    unpublished: int
    free: int
    shared: dict[str, list[str]] = field(default_factory=dict)
    """Time-sliced reservation -> fractional pods on its GPU (members, ``holder:<rsv>``)."""

    @property
    def total_in_use(self) -> int:
        return sum(self.in_use.values())


class DriverMixin:
    engine: Engine
    name: str

    if TYPE_CHECKING:

        def _tx(self) -> AbstractContextManager[tuple[Ctx, Blocks]]: ...
        def _commit_changes(self, ctx: Ctx) -> None: ...

    def settle(self) -> datetime | None:
        """Apply every transition due up to the clock's now; return the next event instant."""
        with self._tx() as (ctx, _b):
            nxt = ctx.conn.execute(
                sa.select(t.pools.c.next_event_at).where(t.pools.c.name == self.name)
            ).scalar_one()
            ctx.conn.execute(
                t.pools.update().where(t.pools.c.name == self.name).values(clock_at=ctx.now)
            )
        return None if nxt is None else views.to_dt(nxt)

    def next_event_at(self) -> datetime | None:
        with self._tx() as (ctx, _b):
            nxt = ctx.conn.execute(
                sa.select(t.pools.c.next_event_at).where(t.pools.c.name == self.name)
            ).scalar_one()
        return None if nxt is None else views.to_dt(nxt)

    def revision(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(t.pools.c.revision).where(t.pools.c.name == self.name)
                ).scalar_one()
            )

    def usage_history(self) -> list[UsagePoint]:
        u = t.usage
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(u.c.at, u.c.data).where(u.c.pool == self.name).order_by(u.c.id)
            ).all()
        out = []
        for at, data in rows:
            d = json.loads(data)
            out.append(
                UsagePoint(
                    views.to_dt(at),
                    d["in_use"],
                    d["terminating"],
                    d["unpublished"],
                    d["free"],
                    d.get("shared", {}),
                )
            )
        return out

    def operation_log(self) -> list[Operation]:
        """Every accepted mutation, in order, with its recorded (not live) state."""
        o = t.operations
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(o).where(o.c.pool == self.name).order_by(o.c.seq)).all()
        return [views.to_operation(r, OperationState(r.state)) for r in rows]

    def observe(self) -> dict[str, DeployView]:
        """Every deploy of the pool, read the way an observer would: injected faults do not apply.

        For reports and samples (``gps_dagster.simulation``): a sampler going
        through the ``Core`` reads would consume (or trip over) the one-shot
        faults meant for the engine.
        """
        with self._tx() as (ctx, _b):
            d = t.deploys
            query = sa.select(d).where(d.c.pool == self.name).order_by(d.c.ordinal)
            rows = list(ctx.conn.execute(query))
            return views.deploy_views(ctx, rows)

    def deploy_ids(self) -> list[str]:
        d = t.deploys
        with self.engine.connect() as conn:
            return [
                r[0]
                for r in conn.execute(
                    sa.select(d.c.id).where(d.c.pool == self.name).order_by(d.c.ordinal)
                )
            ]

    # -- faults --------------------------------------------------------------------------

    def inject_fault(self, fault: FaultSpec) -> None:
        """Persist a fault now; every process using this pool sees it."""
        reason = fault_problem(fault, set(self.deploy_ids()))
        if reason:
            raise AdmissionRefused(
                reason, f"fault {fault.model_dump(exclude_defaults=True)}: {reason}"
            )
        with self._tx() as (ctx, _b):
            faults.insert(ctx.conn, self.name, fault)
            ctx.forget()  # a forced state changes deploy rows
            self._commit_changes(ctx)

    def clear_faults(self) -> None:
        with self._tx() as (ctx, _b):
            faults.clear(ctx.conn, self.name, ctx.now + ctx.timings.start_delay_s)
            ctx.forget()
            place_pending(ctx, blocked=set(), never_ready=set())
            self._commit_changes(ctx)

    def faults(self) -> list[FaultSpec]:
        with self.engine.connect() as conn:
            return faults.listed(conn, self.name)

    # -- foreign workloads and accounts -------------------------------------------------

    def add_foreign(
        self,
        workload_id: str,
        gpus: int,
        *,
        kind: Literal["static", "intruder"] = "static",
        node: str | None = None,
        flavor: str | None = None,
    ) -> None:
        """A workload no schedule owns: ``static`` takes GPUs now; ``intruder`` grabs published
        ones."""
        with self._tx() as (ctx, _b):
            f = t.foreign
            taken = ctx.conn.execute(
                sa.select(f.c.id).where(f.c.pool == self.name, f.c.id == workload_id)
            ).first()
            if taken is not None or views.deploy_row(ctx, workload_id) is not None:
                raise AdmissionRefused("duplicate_holder", f"{workload_id!r} already exists")
            ctx.conn.execute(
                f.insert().values(
                    pool=self.name, id=workload_id, kind=kind, gpus=gpus, flavor=flavor
                )
            )
            if kind == "static":
                self._place_static(ctx, workload_id, gpus, node, flavor)
            self._commit_changes(ctx)

    @staticmethod
    def _place_static(
        ctx: Ctx, workload_id: str, gpus: int, node: str | None, flavor: str | None
    ) -> None:
        free = free_by_node(ctx)
        if node is None:
            chosen = choose_nodes(ctx, free, flavor, gpus, 1)
            node = chosen[0] if chosen else None
        if node is None or free.get(node, 0) < gpus:
            raise AdmissionRefused(
                "insufficient_capacity",
                f"{workload_id}: {gpus} free GPUs not available on one node",
            )
        allocate(ctx, node, gpus, workload_id, "foreign", None)
        ctx.touched.add(workload_id)

    def remove_foreign(self, workload_id: str) -> None:
        """The workload ends: its GPUs terminate, then are published after the lag."""
        with self._tx() as (ctx, _b):
            f = t.foreign
            gone = ctx.conn.execute(
                f.delete().where(f.c.pool == self.name, f.c.id == workload_id)
            ).rowcount
            if not gone:
                raise NotFound(f"no foreign workload {workload_id!r}")
            release(ctx, workload_id)
            self._commit_changes(ctx)

    def set_project(
        self, project: str, *, gpu_quota: int | None = None, billing: str | None = None
    ) -> None:
        """Change a project's quota and/or billing status (admin action)."""
        p = t.projects
        values: dict[str, object] = {}
        if gpu_quota is not None:
            values["gpu_quota"] = gpu_quota
        if billing is not None:
            values["billing"] = billing
        with self._tx() as (ctx, _b):
            if (
                not values
                or not ctx.conn.execute(
                    p.update().where(p.c.pool == self.name, p.c.name == project).values(**values)
                ).rowcount
            ):
                raise NotFound(f"no project {project!r} (or nothing to change)")
            self._commit_changes(ctx)

    def grab_now(self) -> None:
        """Let intruders take currently published free GPUs (normally only at publish time)."""
        with self._tx() as (ctx, _b):
            grab_for_intruders(ctx)
            self._commit_changes(ctx)


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """Integrals of a usage history over ``[start, end)`` (GPU-seconds)."""

    start: datetime
    end: datetime
    max_in_use: int
    in_use_gpu_s: float
    idle_gpu_s: float
    """Free or released-but-unpublished GPUs: capacity nobody could use."""
    terminating_gpu_s: float
    by_holder_gpu_s: dict[str, float]


def summarize(points: list[UsagePoint], end: datetime) -> UsageSummary:
    """Max GPUs in use and GPU-seconds per category, each point lasting until the next."""
    if not points:
        raise ValueError("empty usage history")
    in_use = idle = term = 0.0
    holders: dict[str, float] = {}
    for i, p in enumerate(points):
        until = points[i + 1].at if i + 1 < len(points) else end
        span = max((until - p.at).total_seconds(), 0.0)
        in_use += span * p.total_in_use
        idle += span * (p.free + p.unpublished)
        term += span * p.terminating
        for h, n in p.in_use.items():
            if span and n:
                holders[h] = holders.get(h, 0.0) + span * n
    return UsageSummary(
        points[0].at, end, max(p.total_in_use for p in points), in_use, idle, term, holders
    )


__all__ = ["DriverMixin", "UsagePoint", "UsageSummary", "summarize"]
