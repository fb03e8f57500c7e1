"""``simulate`` on SimPool vs MemoryPool, same run: per-pass time, and the pool's own share.

The replay is the same (the reports are equal, ``tests/engine/test_memory_pool_replay.py``);
what differs is what each pool call costs. Prints, per case and pool, the wall time per pass
and the CPU time spent inside pool calls per pass (the outermost call only).

Usage: ``python bench/sim_memory.py [demo-1h|seed-1d|demo-1d|seed-1y ...]``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim.memory import MemoryPool
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.simulation import simulate
from tests.engine.harness import SEED_MONDAY, example, seed_pool, seed_schedule

H = timedelta(hours=1)
CASES = {
    "demo-1h": ("demo-schedule.json", "demo-pool.yaml", H),
    "seed-1d": (None, None, 24 * H),
    "demo-1d": ("demo-schedule.json", "demo-pool.yaml", 24 * H),
    "seed-1y": (None, None, 365 * 24 * H),
}
CALLS = (
    "get_deploy",
    "get_deploys",
    "preview_capacity",
    "alias_guard",
    "check_quota",
    "check_billing",
    "get_operation",
    "list_members",
    "admission_preview",
    "witness",
    "reservation_deploys",
    "stop",
    "start",
    "set_replica_intent",
    "submit_many",
    "settle",
    "observe",
    "usage_history",
    "operation_log",
)


class PoolClock:
    """CPU seconds inside pool calls (nested calls counted once)."""

    def __init__(self) -> None:
        self.seconds, self.depth = 0.0, 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.process_time() - start

        return timed


def run(case: str, memory: bool) -> tuple[float, float, int]:
    sched, pool, span = CASES[case]
    s = example(sched) if sched else seed_schedule()
    p = example(pool) if pool else seed_pool()
    meter = PoolClock()
    cls: type[Any] = MemoryPool if memory else SimPool
    saved = {name: getattr(cls, name) for name in CALLS}
    for name, fn in saved.items():
        setattr(cls, name, meter.wrap(fn))
    try:
        start = time.perf_counter()
        rep = simulate(
            load_schedule(s), load_pool(p), SEED_MONDAY, SEED_MONDAY + span, memory_pool=memory
        )
        wall = time.perf_counter() - start
    finally:
        for name, fn in saved.items():
            setattr(cls, name, fn)
    return wall, meter.seconds, rep.passes


def main() -> None:
    for case in sys.argv[1:] or ["demo-1h", "seed-1d"]:
        for memory in (False, True):
            wall, pool_s, passes = run(case, memory)
            name = "MemoryPool" if memory else "SimPool"
            print(
                f"{case:8} {name:10} passes={passes:5d} wall {wall:7.2f} s = "
                f"{1000 * wall / passes:6.1f} ms/pass; in pool calls "
                f"{1000 * pool_s / passes:6.2f} ms/pass (CPU)",
                flush=True,
            )


if __name__ == "__main__":
    main()
