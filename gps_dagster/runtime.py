"""The composition root: store + core + clock + engine, from configuration.

Used by the CLI, the Dagster code location and the demo, so they all see the
same database (``GPS_DB_URL``, default ``var/gps.sqlite``) and the same pool.
The core is the embedded simulated pool (``GPS_POOL_FILE``, default the seed's
10-GPU pool), loaded into the database on first use and shared by every
process from then on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import WallClock
from gps_dagster.domain.pool import parse_pool
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.engine import Engine
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.ports import Clock
from gps_dagster.store.repository import Store

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POOL = REPO_ROOT / "examples" / "seed-pool-10.yaml"


@dataclass
class Runtime:
    store: Store
    core: SimPool
    engine: Engine
    clock: Clock


def pool_file() -> Path:
    return Path(os.environ.get("GPS_POOL_FILE") or DEFAULT_POOL)


def build_runtime(
    db_url: str | None = None,
    pool: str | Path | None = None,
    clock: Clock | None = None,
    config: EngineConfig | None = None,
    *,
    reload_pool: bool = False,
) -> Runtime:
    """Open the store (migrating it) and the simulated pool named by ``pool`` (loading it once)."""
    store = Store.open(db_url)
    clock = clock or WallClock()
    path = Path(pool) if pool is not None else pool_file()
    spec = parse_pool(path.read_text(encoding="utf-8"), source=str(path))
    core = SimPool.create(store.engine, spec, clock, replace=reload_pool)
    engine = Engine(store, core, clock, config or EngineConfig(), **hooks(store, core))
    return Runtime(store, core, engine, clock)
