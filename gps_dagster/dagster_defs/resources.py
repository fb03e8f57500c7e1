"""The one resource of the Dagster layer, ``gps``: ``get_runtime()`` (store, core, engine,
clock). ``GpsResource`` builds the runtime once per process from the environment's settings,
its fields overriding them as the CLI's options do, so the daemon, the webserver and every run
worker build the same one. Tests wrap a runtime in ``StaticRuntime`` and ``hardcoded_resource``:
Dagster copies ``ConfigurableResource`` instances, so a fake must not be one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime, Settings

_CACHE: dict[Settings, Runtime] = {}
_LOCK = threading.Lock()


def cached_runtime(**overrides: Any) -> Runtime:
    """``build_runtime`` once per process and settings (environment + ``overrides``)."""
    from gps_dagster.runtime import build_runtime, settings_from_env

    settings = settings_from_env(**overrides)
    with _LOCK:
        if settings not in _CACHE:
            _CACHE[settings] = build_runtime(settings)
        return _CACHE[settings]


class GpsResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The gps_dagster runtime of the settings: product database + backend + clock."""

    db_url: str | None = Field(
        default=None,
        description="Product database URL; None = $GPS_DB_URL, else sqlite:///var/gps.sqlite.",
    )
    pool_file: str | None = Field(
        default=None,
        description="Pool file of the simulated pool; None = $GPS_POOL_FILE, else the seed "
        "pool shipped in the package (gps_dagster/examples/seed-pool-10.yaml).",
    )
    backend: str | None = Field(
        default=None,
        description="sim or kubernetes; None = $GPS_BACKEND, else sim.",
    )
    kubeconfig: str | None = Field(
        default=None,
        description="Kubeconfig file (kubernetes); None = $GPS_KUBECONFIG, $KUBECONFIG or "
        "in-cluster.",
    )
    kube_context: str | None = Field(
        default=None,
        description="Kubeconfig context; None = $GPS_KUBE_CONTEXT or the current one.",
    )

    capacity_poll_s: float = Field(
        default=10.0,
        description="Seconds an admit op watches a capacity preview before it hands the "
        "acquire to the capacity-wait sensor (0 = hand over at once).",
    )

    prearm_lead_s: float | None = Field(
        default=None,
        description="Seconds ahead of a release-first boundary its gps_prearmed run is "
        "launched (it waits for the boundary inside a started run). None = measured: the p95 "
        "of the instance's recent run starts (creation → start, so a Kubernetes Job launcher "
        "gets more) + 10 s, at least 30 s; 0 = off (runs launched at the boundary).",
    )

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def get_runtime(self) -> Runtime:
        return cached_runtime(
            db_url=self.db_url,
            pool_file=self.pool_file,
            backend=self.backend,
            kubeconfig=self.kubeconfig,
            kube_context=self.kube_context,
        )


class StaticRuntime:
    """A ready-made runtime (tests: virtual clock); wrap with ``hardcoded_resource``."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        capacity_poll_s: float = 0.0,
        sleeper: Callable[[float], object] | None = None,
        prearm_lead_s: float = 0.0,
    ) -> None:
        self._runtime = runtime
        self.capacity_poll_s = capacity_poll_s
        self.prearm_lead_s = prearm_lead_s
        self._sleeper = sleeper

    def sleep(self, seconds: float) -> None:
        """The test's sleeper (e.g. a virtual clock's ``advance``), else a real sleep."""
        if self._sleeper is not None:
            self._sleeper(seconds)
        else:
            time.sleep(seconds)

    def get_runtime(self) -> Runtime:
        return self._runtime


def as_resource(runtime: Runtime | StaticRuntime, **options: Any) -> dg.ResourceDefinition:
    """A resource definition serving this exact runtime object (no copy)."""
    served = runtime if isinstance(runtime, StaticRuntime) else StaticRuntime(runtime, **options)
    return dg.ResourceDefinition.hardcoded_resource(served, "gps runtime (fixed)")


def capacity_poll_s(gps: Any) -> float:
    """How long an admit op watches a capacity preview (resource setting; 0 when absent)."""
    return float(getattr(gps, "capacity_poll_s", 0.0) or 0.0)


def sleep(gps: Any, seconds: float) -> None:
    """Wait through the resource (tests inject a virtual clock's advance)."""
    waiter = getattr(gps, "sleep", None)
    if waiter is not None:
        waiter(seconds)
    else:
        time.sleep(seconds)


def pauser(gps: Any) -> Callable[[float], None] | None:
    """The resource's sleep as a pause for the engine's waits (none without a resource)."""
    return None if gps is None else lambda seconds: sleep(gps, seconds)
