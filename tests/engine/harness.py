"""A small world for engine tests: store + simulated pool + engine on one virtual clock.

Nothing is mocked: the engine talks to the real simulated pool through the
Core port, over a real database (SQLite or the PostgreSQL server of
``make test``), and time only moves when a test moves it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import PoolSpec, load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import Engine, EngineConfig, PassReport
from gps_dagster.ports import DeployView
from gps_dagster.store import Store
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.store.reservations import ReservationRepository

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEED_MONDAY = datetime.fromisoformat("2026-10-19T00:00:00+07:00")


def example(name: str) -> dict[str, Any]:
    text = (EXAMPLES / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def seed_schedule() -> dict[str, Any]:
    return example("seed-schedule.json")


def seed_pool() -> dict[str, Any]:
    return example("seed-pool-10.yaml")


@dataclass
class World:
    clock: VirtualClock
    store: Store
    pool: SimPool
    engine: Engine
    spec: Schedule
    pool_spec: PoolSpec

    def tick(self, seconds: float = 30) -> PassReport:
        """One engine pass now, then move the clock."""
        report = self.engine.run_pass()
        self.clock.advance(seconds)
        return report

    def run_until(self, until: datetime, *, every: float = 30) -> list[PassReport]:
        reports = []
        while self.clock.now() < until:
            reports.append(self.tick(every))
        return reports

    def at(self, iso: str) -> datetime:
        return datetime.fromisoformat(iso)

    def status(self, target: str) -> TargetStatusRow:
        row = self.store.get_status(self.spec.name, target)
        assert row is not None, f"no status for {target}"
        return row

    def deploy(self, target: str) -> DeployView:
        return self.pool.get_deploy(target)

    def apply(self, doc: dict[str, Any]) -> Schedule:
        self.spec = load_schedule(doc)
        self.store.apply_schedule(self.spec, now=self.clock.now())
        return self.spec

    def operations(self, deploy: str | None = None, kind: str | None = None) -> list[Any]:
        return [
            o
            for o in self.pool.operation_log()
            if (deploy is None or o.deploy_id == deploy) and (kind is None or o.kind.value == kind)
        ]


def make_world(
    db_url: str,
    *,
    schedule: dict[str, Any] | None = None,
    pool: dict[str, Any] | None = None,
    start: datetime = SEED_MONDAY,
    config: EngineConfig | None = None,
    gate: str = "enforce",
    engine: Engine | None = None,
) -> World:
    clock = VirtualClock(start)
    store = Store.open(db_url)
    pool_spec = load_pool(copy.deepcopy(pool or seed_pool()))
    sim = SimPool.create(
        store.engine, pool_spec, clock, replace=True, ledger=ReservationRepository(store.engine)
    )
    spec = load_schedule(copy.deepcopy(schedule or seed_schedule()))
    store.apply_schedule(spec, now=start)
    store.set_gate(gate, now=start)
    eng = engine or Engine(store, sim, clock, config or EngineConfig(), database_clock=clock)
    return World(clock, store, sim, eng, spec, pool_spec)


# -- helpers shared by the warning, crash, edit and scenario tests ------------------------------

TZ = SEED_MONDAY.tzinfo
A, B, C = "md-llama70b", "md-qwen32b", "md-bge-embed"


def local(iso: str) -> datetime:
    """``"2026-10-19T18:00"`` in the seed's timezone (UTC+7)."""
    return datetime.fromisoformat(iso).replace(tzinfo=TZ)


def a_running_pool() -> dict[str, Any]:
    """The seed pool as it stands in business hours: A running, B stopped, C running."""
    pool = seed_pool()
    pool["deploys"][0]["state"] = "running"
    pool["deploys"][1]["state"] = "stopped"
    return pool


def cmp_pool(
    *, quota: int | None = None, billing: str = "ok", a_running: bool = True
) -> dict[str, Any]:
    """The seed pool with A and B as CMP deploys of project ``chat`` (for quota/billing paths)."""
    pool = a_running_pool() if a_running else seed_pool()
    for dep in pool["deploys"][:2]:
        dep["project"] = "chat"
    pool["projects"] = {"chat": {"gpu_quota": quota, "billing": billing}}
    return pool


def cmp_schedule() -> dict[str, Any]:
    doc = seed_schedule()
    doc["scope"] = "cmp:chat"
    return doc


def run_for(world: World, seconds: float, *, every: float = 30) -> list[PassReport]:
    """Passes every ``every`` seconds for ``seconds`` of virtual time (the pool settles lazily)."""
    return world.run_until(world.clock.now() + timedelta(seconds=seconds), every=every)


def jump(world: World, instant: datetime) -> None:
    """Move the virtual clock without passes (between boundaries), then let the pool catch up."""
    world.clock.set(instant)
    world.pool.settle()


def op_triples(world: World) -> list[tuple[str, str, str]]:
    """(deploy, kind, idempotency key) of every mutation the pool accepted, in order."""
    return [(o.deploy_id, o.kind.value, o.idempotency_key) for o in world.pool.operation_log()]
