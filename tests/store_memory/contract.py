"""Run the store tests written for ``db_url`` on the SQL store and on ``MemoryStore``.

A test of ``tests/engine`` that takes ``db_url`` opens its store with ``Store.open(db_url)`` or
``harness.make_world(db_url)``. Run with ``db_url = memory_url(...)``, both open a
``MemoryStore`` instead (one per URL, so a second ``Store.open`` of the same URL is the same
store, as a second connection to one database is), the simulated pool keeping its own tables
in a SQLite file beside it and sharing the store's reservation ledger. The test bodies, and
their assertions, are the originals.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from datetime import datetime
from types import ModuleType
from typing import Any

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.memory import MemoryStore
from tests.engine import harness

MEMORY = "memory://"


def memory_url(tmp: Any) -> str:
    return f"{MEMORY}{tmp}"


class Stores:
    """``Store.open`` for the tests: a ``MemoryStore`` per memory URL, else the SQL store."""

    def __init__(self) -> None:
        self.opened: dict[str, MemoryStore] = {}

    def open(self, url: str | None = None, *, upgrade: bool = True) -> Any:
        if url is None or not url.startswith(MEMORY):
            return Store.open(url, upgrade=upgrade)
        if url not in self.opened:
            self.opened[url] = MemoryStore(VirtualClock(harness.SEED_MONDAY))
        return self.opened[url]


def memory_world(stores: Stores, tmp: Any) -> Callable[..., harness.World]:
    """``harness.make_world`` on a ``MemoryStore``; the pool's tables in a SQLite file."""

    def make_world(
        db_url: str,
        *,
        schedule: dict[str, Any] | None = None,
        pool: dict[str, Any] | None = None,
        start: datetime = harness.SEED_MONDAY,
        config: EngineConfig | None = None,
        gate: str = "enforce",
        engine: Engine | None = None,
    ) -> harness.World:
        if not db_url.startswith(MEMORY):
            return harness_make_world(
                db_url,
                schedule=schedule,
                pool=pool,
                start=start,
                config=config,
                gate=gate,
                engine=engine,
            )
        clock = VirtualClock(start)
        store = stores.open(db_url)
        store._clock = clock
        pool_spec = load_pool(copy.deepcopy(pool or harness.seed_pool()))
        db = create_db_engine(f"sqlite:///{tmp}/pool.sqlite")
        sim = SimPool.create(db, pool_spec, clock, replace=True, ledger=store.ledger())
        spec = load_schedule(copy.deepcopy(schedule or harness.seed_schedule()))
        store.apply_schedule(spec, now=start)
        store.set_gate(gate, now=start)
        eng = engine or Engine(store, sim, clock, config or EngineConfig(), database_clock=clock)
        return harness.World(clock, store, sim, eng, spec, pool_spec)

    return make_world


harness_make_world = harness.make_world


def adopt(namespace: dict[str, Any], modules: list[ModuleType], excluded: dict[str, str]) -> None:
    """Bring every ``db_url`` test of ``modules`` into ``namespace`` (as ``test_<module>__<name>``),
    except the ``excluded`` ones (``module::name`` -> why it cannot run on memory)."""
    for mod in modules:
        short = mod.__name__.rsplit(".", 1)[1].removeprefix("test_")
        for name, fn in vars(mod).items():
            if not name.startswith("test_") or not callable(fn):
                continue
            if "db_url" not in inspect.signature(fn).parameters:
                continue
            if f"{mod.__name__.rsplit('.', 1)[1]}::{name}" in excluded:
                continue
            namespace[f"test_{short}__{name.removeprefix('test_')}"] = fn


def patch_modules(
    monkeypatch: pytest.MonkeyPatch, modules: list[ModuleType], stores: Stores, tmp: Any
) -> None:
    world = memory_world(stores, tmp)
    for mod in [*modules, harness]:
        if hasattr(mod, "Store"):
            monkeypatch.setattr(mod, "Store", stores)
        if hasattr(mod, "make_world"):
            monkeypatch.setattr(mod, "make_world", world)
