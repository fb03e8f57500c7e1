"""Benchmark of the simulated pool at production size.

1,000 nodes x 8 GPUs = 8,000 GPUs, 2,000 deploys (1,500 running). Prints the
time per ``preview_capacity`` and per start/stop cycle, and their ratio to a
baseline measured in the same run on the same database: one trivial indexed
SELECT in its own transaction. Goal: preview <= 5 ms at this size.

Usage: ``python bench/sim.py [--db URL] [--nodes N] [--deploys N]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim import schema as t
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.store.db import create_db_engine

GOAL_PREVIEW_MS = 5.0


def pool_doc(nodes: int, deploys: int) -> dict[str, object]:
    running = deploys * 3 // 4
    items: list[dict[str, object]] = []
    for i in range(deploys):
        gpus = (2, 4, 8)[i % 3] if i >= running else (2, 4)[i % 2]
        items.append(
            {
                "id": f"md-{i:05d}",
                "gpus_per_replica": gpus,
                "state": "running" if i < running else "stopped",
            }
        )
    return {
        "name": "bench",
        "nodes": [{"name": f"node-{i:04d}", "gpus": 8} for i in range(nodes)],
        "deploys": items,
        "sim": {"record_usage": True},
    }


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", default=None, help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--deploys", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.db or f"sqlite:///{Path(tmp.name) / 'bench.sqlite'}"
    engine = create_db_engine(url)
    clock = VirtualClock(datetime(2026, 10, 19, tzinfo=UTC))
    spec = load_pool(pool_doc(args.nodes, args.deploys))
    t0 = time.perf_counter()
    sim = SimPool.create(engine, spec, clock, replace=True)
    load_s = time.perf_counter() - t0
    stopped = [d.id for d in spec.deploys if d.state == "stopped"]
    eight = next(d.id for d in spec.deploys if d.state == "stopped" and d.gpus_per_replica == 8)

    def baseline() -> None:
        with engine.begin() as conn:
            conn.execute(
                sa.select(t.deploys.c.version).where(
                    t.deploys.c.pool == "bench", t.deploys.c.id == eight
                )
            ).scalar_one()

    cycle_ids = iter(stopped * 4)

    def cycle() -> None:
        dep = next(cycle_ids)
        view = sim.get_deploy(dep)
        op = sim.start(dep, etag=view.etag, idempotency_key=f"start-{dep}-{view.etag}")
        sim.stop(
            dep,
            etag=op.etag_after,
            allow_aliased_downtime=False,
            idempotency_key=f"stop-{dep}-{view.etag}",
        )
        clock.advance(1)

    base = statistics.median(timed(baseline, args.runs))
    preview = statistics.median(
        timed(lambda: sim.preview_capacity(eight, delta_replicas=1), args.runs)
    )
    preview_many = statistics.median(
        timed(lambda: sim.preview_capacity(eight, delta_replicas=50), args.runs // 4)
    )
    cycles = statistics.median(timed(cycle, min(100, len(stopped))))
    gpus = args.nodes * 8
    print(
        f"pool: {args.nodes} nodes, {gpus} GPUs, {args.deploys} deploys ({engine.dialect.name}); "
        f"loaded in {load_s:.1f} s"
    )
    print(f"baseline indexed SELECT (own transaction): {base:.3f} ms")
    print(
        f"preview_capacity (+1 group of 8):   {preview:.3f} ms  = {preview / base:.1f}x baseline  "
        f"(goal <= {GOAL_PREVIEW_MS} ms: {'met' if preview <= GOAL_PREVIEW_MS else 'MISSED'})"
    )
    print(
        f"preview_capacity (+50 groups of 8): {preview_many:.3f} ms  = {preview_many / base:.1f}x "
        "baseline"
    )
    print(f"start/stop cycle (get+start+stop):  {cycles:.3f} ms  = {cycles / base:.1f}x baseline")
    engine.dispose()
    tmp.cleanup()


if __name__ == "__main__":
    main()
