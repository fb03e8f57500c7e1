"""Helpers of the Dagster layer tests: a real runtime (store + simulated pool + engine)
on a virtual clock, served to Dagster through ``StaticRuntime``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import PoolSpec, parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
MONDAY_0800 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
"""Monday 2026-10-19 08:00 +07: the seed's business-hours boundary (A on, B off)."""

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


@dataclass
class Runtime:
    store: Store
    core: SimPool
    engine: Engine
    clock: VirtualClock
    pool: PoolSpec


def make_runtime(
    url: str,
    *,
    start: datetime = MONDAY_0800,
    pool_file: Path = EXAMPLES / "seed-pool-10.yaml",
    config: EngineConfig | None = None,
) -> Runtime:
    clock = VirtualClock(start)
    store = Store.open(url)
    pool = parse_pool(pool_file.read_text(), source=str(pool_file))
    core = SimPool.create(store.engine, pool, clock, replace=True)
    store.set_gate("enforce", now=clock.now())
    return Runtime(store, core, Engine(store, core, clock, config), clock, pool)


def seed_schedule(rt: Runtime, path: Path = EXAMPLES / "seed-schedule.json", **changes: Any) -> Schedule:
    spec = parse_schedule(path.read_text(), source=str(path))
    if changes:
        spec = spec.model_copy(update=changes)
    rt.store.apply_schedule(spec, now=rt.clock.now())
    return spec
