"""Benchmark: the engine's store in memory against the SQL store (SQLite), same replay.

1. ``simulate`` of the demo schedule for 1 h and of the seed schedule for 1 day, on the SQL
   ``Store`` and on ``MemoryStore`` (the same SQL simulated pool both times): seconds, passes,
   ms per pass.
2. History growth: the seed schedule on ``FakeCore`` + ``MemoryStore``, one pass every
   ``EVERY_S`` seconds for ``DAYS`` days (two swaps a weekday): ms per pass on the first and the
   last day and the time spent inside the store's methods per pass. A store that scanned its
   history would grow here.

``python bench/memory_store.py [DAYS [EVERY_S]]`` (default a year, a pass every 30 minutes).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from datetime import datetime, timedelta
from functools import wraps
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.simulation import simulate
from gps_dagster.store.memory import MemoryStore
from gps_dagster.testing import FakeCore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEED_MONDAY = datetime.fromisoformat("2026-10-19T00:00:00+07:00")
DEMO_START = datetime.fromisoformat("2026-10-19T07:30:00+00:00")


def example(name: str) -> Any:
    text = (EXAMPLES / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def replays() -> None:
    cases = [
        ("demo 1 h", "demo-schedule.json", "demo-pool.yaml", DEMO_START, timedelta(hours=1)),
        ("seed 1 day", "seed-schedule.json", "seed-pool-10.yaml", SEED_MONDAY, timedelta(days=1)),
    ]
    for label, schedule, pool, start, span in cases:
        for memory in (False, True):
            t0 = time.perf_counter()
            rep = simulate(
                load_schedule(example(schedule)),
                load_pool(example(pool)),
                start,
                start + span,
                memory_store=memory,
            )
            took = time.perf_counter() - t0
            store = "memory" if memory else "sqlite"
            print(
                f"{label:11} {store:7} {took:7.2f} s  {rep.passes:5} passes  "
                f"{1000 * took / max(rep.passes, 1):7.1f} ms/pass"
            )


class Timed:
    """Wall time spent inside the store's public methods."""

    def __init__(self, store: MemoryStore) -> None:
        self.spent = 0.0
        for name in dir(store):
            method = getattr(store, name)
            if name.startswith("_") or not callable(method):
                continue
            setattr(store, name, self.wrap(method))

    def wrap(self, method: Any) -> Any:
        @wraps(method)
        def run(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args, **kw)
            finally:
                self.spent += time.perf_counter() - t0

        return run


def growth(days: int, every_s: float) -> None:
    clock = VirtualClock(SEED_MONDAY)
    store = MemoryStore(clock)
    pool = example("seed-pool-10.yaml")
    spec = load_pool(copy.deepcopy(pool))
    core = FakeCore(spec, clock, timings=spec.sim.timings)
    store.apply_schedule(load_schedule(example("seed-schedule.json")), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    engine = Engine(store, core, clock, EngineConfig(), database_clock=clock)
    timed = Timed(store)
    for day in range(days):
        t0, spent0, passes = time.perf_counter(), timed.spent, 0
        end = SEED_MONDAY + timedelta(days=day + 1)
        while clock.now() < end:
            engine.run_pass()
            clock.advance(every_s)
            passes += 1
        took = time.perf_counter() - t0
        if day in (0, 1, days - 2, days - 1):
            print(
                f"day {day + 1:3}: {passes} passes, {1000 * took / passes:5.2f} ms/pass, store "
                f"{1000 * (timed.spent - spent0) / passes:5.2f} ms/pass; {len(store.transitions)} "
                f"transitions, {len(store.actions)} steps, {len(store.events)} events"
            )


if __name__ == "__main__":
    replays()
    growth(
        int(sys.argv[1]) if len(sys.argv) > 1 else 365,
        float(sys.argv[2]) if len(sys.argv) > 2 else 1800,
    )
