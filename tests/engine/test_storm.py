"""A storm of 1,000 schedules at one boundary, served by 3 replicas in 3 processes (issue 13).

Correctness at scale, not speed (``bench/storm.py`` measures that): 1,000
schedules flip at 22:00, each a release (stop) and an acquire (start); the
pool has exactly one GPU per schedule, so each start needs the GPUs a stop
frees. Three replicas share the due work by claims; every step must reach the
core exactly once, every target converge, and no GPU be promised twice.
"""

from __future__ import annotations

import json
import multiprocessing
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim import schema as sim
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from tests.engine.night_fleet import night_pool, night_schedule
from tests.engine.storm_worker import worker

N = 1000
T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")


def pool_doc() -> dict[str, Any]:
    return night_pool(N)


def schedule_doc(i: int) -> dict[str, Any]:
    return night_schedule(i)


def instants() -> list[str]:
    """The boundary, the releases' GPUs published (+90 s), the starts ready (+120 s)."""
    at = [BOUNDARY + timedelta(seconds=s) for s in (0, 2, 92, 94, 96, 216, 218, 220, 222)]
    return [x.isoformat() for x in at]


@pytest.mark.postgres
def test_three_replicas_serve_a_storm_of_1000_schedules_once_each(
    pg_url: str, tmp_path: Path
) -> None:
    clock = VirtualClock(T0)
    store = Store.open(pg_url)
    pool = SimPool.create(store.engine, load_pool(pool_doc()), clock)
    for i in range(N):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    Engine(store, pool, clock, EngineConfig(holder="setup")).run_pass()  # first plans: no steps

    logs = run_replicas(pg_url, tmp_path)

    ops = SimPool.open(store.engine, "storm", VirtualClock(BOUNDARY + timedelta(hours=1)))
    log = ops.operation_log()
    kinds = Counter((o.deploy_id, o.kind.value) for o in log)
    assert len(log) == 2 * N and set(kinds.values()) == {1}  # every step mutated exactly once
    assert {d for d, k in kinds if k == "stop"} == {f"d{i}-a" for i in range(N)}
    assert {d for d, k in kinds if k == "start"} == {f"d{i}-b" for i in range(N)}
    statuses = store.list_status()
    assert len(statuses) == 2 * N and {s.phase for s in statuses} == {"converged"}
    assert {a.state for a in store.list_actions()} == {"converged"}
    with store.engine.connect() as conn:  # no overcommit: every GPU held once, never beyond
        g = sim.gpus
        held = conn.execute(
            sa.select(g.c.holder, sa.func.count()).where(g.c.state == "held").group_by(g.c.holder)
        ).all()
    assert sorted(h for h, _ in held) == sorted(f"d{i}-b" for i in range(N))
    assert all(n == 1 for _, n in held)
    # the replicas shared the work: at least two of them moved steps
    assert sum(1 for r in logs if r["steps"] > 0) >= 2, logs


def run_replicas(url: str, tmp: Path) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3)
    outs = [tmp / f"replica-{k}.json" for k in range(3)]
    procs = [
        ctx.Process(target=worker, args=(url, "storm", f"replica-{k}", instants(), barrier, str(o)))
        for k, o in enumerate(outs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0
    logs = [json.loads(o.read_text()) for o in outs]
    for entry in logs:
        assert entry["error"] is None, entry["error"]
    return logs
