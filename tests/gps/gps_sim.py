"""Simulated pools with GPU reservations, for the GPS tests (imported by name).

Everything is real: the pool file goes through ``load_pool``, the simulator
records its reservations in the store's ledger (Store.open migrated the
database), and time only moves when a test moves the virtual clock.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import yaml
from gps_fixtures import EXAMPLE, ROOT

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import PoolSpec, gpu_uuid, load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.store import Store
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.store.reservations import ReservationRepository

T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
BUDGET = 136_582
RSV = "rsv-gpu42-shared"
NODE = "hla-worker-042"


def gpu42_reservation_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return doc


def shared_pool(
    members: dict[str, int],
    *,
    running: tuple[str, ...] = (),
    quota: int | None = None,
    gpus: int = 2,
    foreign: list[dict[str, Any]] | None = None,
) -> PoolSpec:
    """Pool ``gpu42``: node hla-worker-042 (``gpus`` H200s), GPU 0 reserved time-sliced for
    ``members``."""
    return load_pool(
        {
            "name": "gpu42",
            "nodes": [
                {"name": NODE, "gpus": gpus, "flavor": "H200-141GB", "gpu_memory_mib": 143771}
            ],
            "projects": {"vision": {"gpu_quota": quota}},
            "reservations": [gpu42_reservation_doc()],
            "deploys": [
                {
                    "id": d,
                    "kind": "deployment",
                    "project": "vision",
                    "gpus_per_replica": 1,
                    "state": "running" if d in running else "stopped",
                    "reservation": {"mode": "time_sliced", "reservation": RSV, "memory_mib": mib},
                }
                for d, mib in members.items()
            ],
            "sim": {
                "timings": {"stop_grace_s": 30, "publish_lag_s": 60, "start_delay_s": 120},
                "foreign": foreign or [],
            },
        }
    )


def example_pool(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    return copy.deepcopy(doc)


def example_schedule(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ROOT / "examples" / name).read_text())
    return doc


def node_uuids(pool: str, node: str, n: int = 8) -> set[str]:
    return {gpu_uuid(pool, node, i) for i in range(n)}


@dataclass
class Sim:
    clock: VirtualClock
    store: Store
    pool: SimPool

    @property
    def ledger(self) -> ReservationRepository:
        return ReservationRepository(self.store.engine)

    def start(self, deploy: str, key: str | None = None) -> None:
        view = self.pool.get_deploy(deploy)
        self.pool.start(
            deploy, etag=view.etag, idempotency_key=key or f"start-{deploy}-{view.etag}"
        )

    def stop(self, deploy: str) -> None:
        view = self.pool.get_deploy(deploy)
        self.pool.stop(
            deploy,
            etag=view.etag,
            allow_aliased_downtime=True,
            idempotency_key=f"stop-{deploy}-{view.etag}",
        )


def open_sim(db_url: str, spec: PoolSpec, start: datetime = T0) -> Sim:
    clock = VirtualClock(start)
    store = Store.open(db_url)
    return Sim(
        clock,
        store,
        SimPool.create(
            store.engine, spec, clock, replace=True, ledger=ReservationRepository(store.engine)
        ),
    )


# -- the engine over a reservation pool ------------------------------------------------------------

TZ7 = timezone(timedelta(hours=7))
A, B, C = "md-vision-chat", "md-vision-batch", "md-vision-embed"


def local(iso: str) -> datetime:
    """``"2026-10-19T18:00"`` in the seed's timezone (UTC+7)."""
    return datetime.fromisoformat(iso).replace(tzinfo=TZ7)


def gpu42_schedule() -> dict[str, Any]:
    return example_schedule("gpu42-schedule.json")


@dataclass
class EngineWorld(Sim):
    engine: Engine
    schedule: str

    def run_until(self, until: datetime, every: float = 30) -> None:
        while self.clock.now() < until:
            self.engine.run_pass()
            self.clock.advance(every)

    def status(self, deploy: str) -> TargetStatusRow:
        row = self.store.get_status(self.schedule, deploy)
        assert row is not None
        return row


def engine_world(
    db_url: str, spec: PoolSpec, schedule: dict[str, Any], start: datetime
) -> EngineWorld:
    sim = open_sim(db_url, spec, start)
    parsed = load_schedule(copy.deepcopy(schedule))
    sim.store.apply_schedule(parsed, now=start)
    sim.store.set_gate("enforce", now=start)
    engine = Engine(sim.store, sim.pool, sim.clock, EngineConfig(), **hooks(sim.store, sim.pool))
    return EngineWorld(sim.clock, sim.store, sim.pool, engine, parsed.name)
