"""Two processes hammering one pool never hand out a GPU twice (SQLite file and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim import schema as t
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.store.db import create_db_engine

HAMMER = Path(__file__).with_name("sim_hammer.py")
ZERO = {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}


def _pool() -> dict[str, object]:
    deploys = [{"id": f"d{i}", "gpus_per_replica": 1} for i in range(10)]
    deploys += [{"id": f"w{i}", "gpus_per_replica": 2} for i in range(3)]
    return {
        "name": "hammer",
        "nodes": [{"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4}],
        "deploys": deploys,
        "sim": {"timings": ZERO},
    }


def _assert_no_double_allocation(url: str, accepted: int) -> None:
    engine = create_db_engine(url)
    sim = SimPool.open(engine, "hammer", VirtualClock(datetime(2030, 1, 1, tzinfo=UTC)))
    sim.settle()
    with engine.connect() as conn:
        gpus = conn.execute(sa.select(t.gpus).where(t.gpus.c.pool == "hammer")).all()
        groups = conn.execute(
            sa.select(
                t.groups.c.deploy, t.groups.c.grp, t.groups.c.state, t.deploys.c.gpus_per_replica
            )
            .join(
                t.deploys,
                sa.and_(t.deploys.c.pool == t.groups.c.pool, t.deploys.c.id == t.groups.c.deploy),
            )
            .where(t.groups.c.pool == "hammer")
        ).all()
    assert len(gpus) == 8 and len({g.uuid for g in gpus}) == 8
    held = Counter((g.holder, g.grp) for g in gpus if g.state == "held")
    placed = {(d, grp): need for d, grp, state, need in groups if state != "pending"}
    assert held == Counter(placed)  # every placed group holds exactly its GPUs, no GPU is shared
    assert sum(held.values()) <= 8
    last = sim.usage_history()[-1]
    assert last.in_use == dict(
        Counter(g.holder for g in gpus if g.state == "held")
    )  # incremental == recount
    assert last.free == sum(1 for g in gpus if g.state == "free")
    log = sim.operation_log()
    assert len(log) == accepted and len({op.idempotency_key for op in log}) == accepted
    engine.dispose()


def _hammer(url: str) -> None:
    engine = create_db_engine(url)
    SimPool.create(engine, load_pool(_pool()), VirtualClock(datetime(2026, 10, 19, tzinfo=UTC)))
    engine.dispose()
    procs = [
        subprocess.Popen(
            [sys.executable, str(HAMMER), url, "hammer", str(seed), "120"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        results.append(json.loads(out))
    accepted = sum(r["ops"] for r in results)
    assert accepted > 50  # the workers really mutated the pool concurrently
    _assert_no_double_allocation(url, accepted)


def test_two_processes_on_one_sqlite_file(sqlite_url: str) -> None:
    _hammer(sqlite_url)


def test_two_processes_on_postgresql(pg_url: str) -> None:
    _hammer(pg_url)
