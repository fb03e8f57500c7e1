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
from typing import Any

import dagster as dg
from pydantic import Field

_CACHE: dict[tuple[str | None, str | None], Any] = {}
_LOCK = threading.Lock()


def cached_runtime(db_url: str | None, pool_file: str | None) -> Any:
    """``build_runtime`` once per process and (database, pool file)."""
    key = (db_url or os.environ.get("GPS_DB_URL"), pool_file or os.environ.get("GPS_POOL_FILE"))
    with _LOCK:
        if key not in _CACHE:
            from gps_dagster.runtime import build_runtime

            _CACHE[key] = build_runtime(key[0], key[1])
        return _CACHE[key]


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
