"""The replica of ``test_outage_log``: the engine loop on a virtual clock, its log to a file.

Sets up a small fleet, runs a pass, signals ``down`` and waits for the test to make the
database refuse connections (``back``), then runs ``passes`` ticks of the real
``EngineLoop`` (its sleeper advances the clock) and, the database restored, one more pass.
Every record (DEBUG included) goes to ``log`` with its traceback, between ``OUTAGE`` markers.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.store import Store
from tests.engine.night_fleet import night_pool, night_schedule

T0 = datetime.fromisoformat("2026-10-19T21:59:00+07:00")


def outage_replica(url: str, log: str, passes: int, down: Any, back: Any, done: Any) -> None:
    handler = logging.FileHandler(log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)
    clock = VirtualClock(T0)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(night_pool(20)), clock)
    for i in range(20):
        store.apply_schedule(load_schedule(night_schedule(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    engine = Engine(store, pool, clock, EngineConfig(holder="outage"))
    engine.run_pass()
    clock.advance(60)  # 22:00: the storm's boundary comes during the outage
    down.set()
    back.wait(timeout=120)
    root.info("OUTAGE BEGIN")
    loop = EngineLoop(engine, clock=clock, sleeper=clock.advance, interval_s=30.0)
    for _ in range(passes):
        loop.tick()
        clock.advance(loop.next_wait() or 1)
    done.set()
    time.sleep(0.5)  # the test restores the database
    recovered = False
    for _ in range(100):
        if loop.tick() is not None:
            recovered = True
            break
        time.sleep(0.1)
    root.info("OUTAGE END recovered=%s", recovered)
