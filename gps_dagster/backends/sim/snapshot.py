"""A consistent picture of the whole pool, for ``gps-dagster pool show`` and reports.

Read in one transaction (after applying due transitions) so nodes, GPUs and
deploys agree with each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim import views
from gps_dagster.ports import DeployView

if TYPE_CHECKING:
    from gps_dagster.backends.sim.core import SimPool


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    flavor: str
    region: str
    gpus: int
    free: int
    """Published free GPUs."""


@dataclass(frozen=True, slots=True)
class GpuRow:
    uuid: str
    node: str
    index: int
    state: str
    """free, held, terminating or unpublished."""
    holder: str | None


@dataclass(frozen=True, slots=True)
class ForeignRow:
    id: str
    kind: str
    gpus: int


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    name: str
    at: datetime
    nodes: tuple[NodeRow, ...]
    gpus: tuple[GpuRow, ...]
    deploys: tuple[DeployView, ...]
    foreign: tuple[ForeignRow, ...]

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def as_dict(self) -> dict[str, Any]:
        deploys = []
        for d in self.deploys:
            item = asdict(d)
            item["kind"], item["state"] = d.kind.value, d.state.value
            item["aliases"] = list(d.aliases)
            deploys.append(item)
        return {
            "name": self.name,
            "at": self.at.isoformat(),
            "capacity": self.capacity,
            "nodes": [asdict(n) for n in self.nodes],
            "gpus": [asdict(g) for g in self.gpus],
            "deploys": deploys,
            "foreign": [asdict(f) for f in self.foreign],
        }


def snapshot(pool: SimPool) -> PoolSnapshot:
    n, g, d, f = t.nodes, t.gpus, t.deploys, t.foreign
    with pool._tx() as (ctx, _b):
        gpus = tuple(
            GpuRow(r.uuid, r.node, r.idx, r.state, r.holder)
            for r in ctx.conn.execute(
                sa.select(g.c.uuid, g.c.node, g.c.idx, g.c.state, g.c.holder, n.c.ordinal)
                .join(n, sa.and_(n.c.pool == g.c.pool, n.c.name == g.c.node))
                .where(g.c.pool == pool.name)
                .order_by(n.c.ordinal, g.c.idx)
            )
        )
        free: dict[str, int] = {}
        for gpu in gpus:
            free[gpu.node] = free.get(gpu.node, 0) + (gpu.state == "free")
        nodes = tuple(
            NodeRow(r.name, r.flavor, r.region, r.gpus, free.get(r.name, 0))
            for r in ctx.conn.execute(
                sa.select(n).where(n.c.pool == pool.name).order_by(n.c.ordinal)
            )
        )
        deploys = tuple(
            views.deploy_view(ctx, r)
            for r in ctx.conn.execute(
                sa.select(d).where(d.c.pool == pool.name).order_by(d.c.ordinal)
            )
        )
        foreign = tuple(
            ForeignRow(r.id, r.kind, r.gpus)
            for r in ctx.conn.execute(sa.select(f).where(f.c.pool == pool.name).order_by(f.c.id))
        )
        at = views.to_dt(ctx.now)
    return PoolSnapshot(pool.name, at, nodes, gpus, deploys, foreign)
