"""The one resource of the Dagster layer: the product runtime (store, core, engine, clock).

Ops and sensors reach the engine only through ``context.resources.gps``, an
object with ``get_runtime()``. In production it is ``GpsResource``, which builds
the runtime once per process from the database URL and the pool file (the
daemon, the webserver and every run worker build their own, all pointing at
the same database). Tests hand a runtime built on a virtual clock to
``StaticRuntime`` and wrap it with ``ResourceDefinition.hardcoded_resource``:
Dagster copies ``ConfigurableResource`` instances, so a fake must not be one.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

REPO = Path(__file__).resolve().parents[2]

_CACHE: dict[tuple[str | None, str | None], Any] = {}
_LOCK = threading.Lock()


def cached_runtime(db_url: str | None, pool_file: str | None) -> Any:
    """``build_runtime`` once per process and (database, pool file)."""
    key = (db_url or os.environ.get("GPS_DB_URL"), pool_file or os.environ.get("GPS_POOL_FILE"))
    with _LOCK:
        if key not in _CACHE:
            try:
                from gps_dagster.engine.runtime import build_runtime
            except ImportError:  # the shared factory is not there yet: same wiring, local
                build_runtime = _build_runtime
            _CACHE[key] = build_runtime(db_url=key[0], pool_file=key[1])
        return _CACHE[key]


@dataclass
class Runtime:
    store: Any
    core: Any
    engine: Any
    clock: Any
    pool: Any


def _build_runtime(db_url: str | None = None, pool_file: str | None = None) -> Runtime:
    """Store + simulated pool (created from the pool file on first use) + engine, wall clock."""
    from gps_dagster.backends.sim import SimPool
    from gps_dagster.clocks import WallClock
    from gps_dagster.domain.pool import parse_pool
    from gps_dagster.engine import Engine
    from gps_dagster.store import Store

    clock = WallClock()
    store = Store.open(db_url)
    path = Path(pool_file or REPO / "examples" / "seed-pool-10.yaml")
    pool = parse_pool(path.read_text(), source=str(path))
    core = SimPool.create(store.engine, pool, clock)
    return Runtime(store, core, Engine(store, core, clock), clock, pool)


class GpsResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The gps_dagster runtime on the wall clock: product database + simulated pool."""

    db_url: str | None = Field(
        default=None,
        description="Product database URL; None = $GPS_DB_URL, else sqlite:///var/gps.sqlite.",
    )
    pool_file: str | None = Field(
        default=None,
        description="Pool file of the simulated pool; None = $GPS_POOL_FILE, else examples/seed-pool-10.yaml.",
    )

    def get_runtime(self) -> Any:
        return cached_runtime(self.db_url, self.pool_file)


class StaticRuntime:
    """A ready-made runtime (tests: virtual clock); wrap with ``hardcoded_resource``."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def get_runtime(self) -> Any:
        return self._runtime


def as_resource(runtime: Any) -> dg.ResourceDefinition:
    """A resource definition serving this exact runtime object (no copy)."""
    return dg.ResourceDefinition.hardcoded_resource(StaticRuntime(runtime), "gps runtime (fixed)")
