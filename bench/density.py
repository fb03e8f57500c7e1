"""Benchmark (issue 21 item 2): evaluation cost against how densely a window fires.

Prints, for the issue's documents (one and 200 windows of ``* * * * *`` lasting ``1m``, the
demo's ``*/4 * * * *`` for ``2m``, the seed), the time and evaluator work units of one
``current_interval`` per target (what a dry-run and an engine pass do) beside the old path
measured in the same run: listing every occurrence over the span the old search covered
(1 + 8 + 32 + 400 days back and forward), which the old evaluator did before sweeping. Then
``simulate`` as it runs by default (in memory) of a day of the demo and a year of the seed, the
issue's goal being <= 10 s each, beside the SQL store + SimPool replay of an hour / a week in the
same run (per simulated day, and the ratio).

    .venv/bin/python bench/density.py [--demo-days D] [--seed-days D]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.domain.evaluator import current_interval
from gps_dagster.domain.occurrences import compile_schedule, counting
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.simulation import simulate

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2026, 10, 20, 3, tzinfo=UTC)
OLD_SPAN_DAYS = 1 + 8 + 32 + 400


def every_minute(n: int) -> Schedule:
    return load_schedule(
        {
            "name": "dense",
            "timezone": "UTC",
            "targets": [{"model_deploy_id": "a", "default_state": "stopped"}],
            "windows": [
                {
                    "name": f"w{i}",
                    "kind": "recurring",
                    "priority": i + 1,
                    "cron": "* * * * *",
                    "duration": "1m",
                    "states": [{"model_deploy_id": "a", "desired_state": "running"}],
                }
                for i in range(n)
            ],
        }
    )


def _secs(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def old_listing(s: Schedule, limit_s: float = 30.0) -> tuple[float, int]:
    """Seconds and occurrences of listing every fire the old search listed (stops at
    ``limit_s``)."""
    c = compile_schedule(s)
    t = int(AT.timestamp())
    start, listed = time.perf_counter(), 0
    for w in c.windows:
        if w.cron is None:
            continue
        for lo, hi in ((t - OLD_SPAN_DAYS * 86_400, t), (t, t + OLD_SPAN_DAYS * 86_400)):
            listed += len(w.cron.fire_epochs(c.tz, lo - w.duration + 1, hi))
        if time.perf_counter() - start > limit_s:
            break
    return time.perf_counter() - start, listed


def evaluation(name: str, s: Schedule) -> None:
    with counting() as work:
        new = _secs(lambda: [current_interval(s, t, AT) for t in s.target_ids])
    old, listed = old_listing(s)
    print(
        f"{name:32} new {new * 1000:9.1f} ms {work.units:7d} units | old path (listing only) "
        f"{old * 1000:9.1f} ms {listed:9d} occurrences | ratio {old / new:8.1f}x"
    )


def simulated(
    name: str, schedule: Path, pool: Path, span: timedelta, baseline_span: timedelta
) -> None:
    """``simulate`` of ``span`` as it runs by default (MemoryStore + MemoryPool; goal <= 10 s),
    beside the same replay on the SQL store and SimPool over ``baseline_span``, in this run."""
    s = load_schedule(json.loads(schedule.read_text()))
    p = load_pool(__import__("yaml").safe_load(pool.read_text()))
    start = datetime(2026, 10, 19, tzinfo=UTC)
    cpu = time.process_time()
    took = _secs(lambda: simulate(s, p, start, start + span))
    cpu = time.process_time() - cpu
    sql = _secs(
        lambda: simulate(s, p, start, start + baseline_span, memory_store=False, memory_pool=False)
    )
    days, base_days = span / timedelta(days=1), baseline_span / timedelta(days=1)
    verdict = (
        "meets" if cpu <= 10 else "MISSES"
    )  # CPU: the wall time of a loaded machine counts others' work
    print(
        f"simulate {name:5} {days:6.1f} days in {cpu:6.2f} s CPU ({verdict} <= 10 s), {took:6.2f} "
        f"s wall at load {os.getloadavg()[0]:.1f} | SQL store + SimPool: {base_days:5.2f} days in "
        f"{sql:6.2f} s = {sql / base_days:7.1f} s per day | ratio per simulated day "
        f"{sql / base_days / (took / days):6.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--demo-days", type=float, default=1.0, help="demo span to simulate (the issue: a day)"
    )
    parser.add_argument(
        "--seed-days", type=float, default=365.0, help="seed span to simulate (the issue: a year)"
    )
    args = parser.parse_args()
    evaluation("1 x '* * * * *' 1m", every_minute(1))
    evaluation("200 x '* * * * *' 1m", every_minute(200))
    evaluation(
        "demo '*/4 * * * *' 2m",
        load_schedule(json.loads((ROOT / "examples/demo-schedule.json").read_text())),
    )
    evaluation(
        "seed", load_schedule(json.loads((ROOT / "examples/seed-schedule.json").read_text()))
    )
    simulated(
        "demo",
        ROOT / "examples/demo-schedule.json",
        ROOT / "examples/demo-pool.yaml",
        timedelta(days=args.demo_days),
        timedelta(hours=1),
    )
    simulated(
        "seed",
        ROOT / "examples/seed-schedule.json",
        ROOT / "examples/seed-pool-10.yaml",
        timedelta(days=args.seed_days),
        timedelta(days=7),
    )


if __name__ == "__main__":
    main()
