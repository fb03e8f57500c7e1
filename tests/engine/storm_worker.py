"""One engine replica of ``test_storm``: passes at shared virtual instants, in its own process.

Spawned (multiprocessing ``spawn``); every replica moves its own
``VirtualClock`` through the same instants and meets the others at a barrier
before each pass, so their passes overlap and compete for the same due work.
"""

from __future__ import annotations

import json
import traceback
from datetime import datetime
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store


def worker(url: str, pool: str, holder: str, instants: list[str], barrier: Any, out: str) -> None:
    log: dict[str, Any] = {"holder": holder, "steps": 0, "schedules": 0, "error": None}
    try:
        store = Store.open(url, upgrade=False)
        clock = VirtualClock(datetime.fromisoformat(instants[0]))
        config = EngineConfig(holder=holder, due_batch=200, page_size=200)
        engine = Engine(store, SimPool.open(store.engine, pool, clock), clock, config)
        for at in instants:
            clock.set(datetime.fromisoformat(at))
            barrier.wait(timeout=300)
            report = engine.run_pass()
            log["steps"] += len(report.steps)
            log["schedules"] += len(report.schedules)
            log.setdefault("errors", []).extend(report.errors)
    except BaseException:  # recorded for the test; the others are freed from the barrier
        log["error"] = traceback.format_exc()
        barrier.abort()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(log, fh)
