"""A ``times: 1`` fault fires once across processes (issue 9 §2.12).

Two processes calling the faulted operation both read ``remaining = 1`` before
either consumes it; the test holds the fault row locked until both wait on it,
then lets them race. Consuming the hit must be one conditional write in the
database, not a write of what each process read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim import schema as t
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, load_pool
from gps_dagster.store.db import create_db_engine

WORKER = Path(__file__).with_name("fault_worker.py")
POOL = {
    "name": "faulty",
    "nodes": [{"name": "n1", "gpus": 4}],
    "deploys": [{"id": "d1", "gpus_per_replica": 1}],
}


def _lock_waiters(engine: sa.Engine) -> int:
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def _wait_for(probe, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_times_1_fault_fires_once_across_two_processes(pg_url: str) -> None:
    engine = create_db_engine(pg_url)
    sim = SimPool.create(engine, load_pool(POOL), VirtualClock(datetime(2026, 10, 19, tzinfo=UTC)))
    sim.inject_fault(FaultSpec(effect="fail_next", op="get_deploy", deploy="d1", times=1))
    cmd = [sys.executable, str(WORKER), pg_url, "faulty", "d1"]
    with engine.connect() as holder:
        holder.execute(
            sa.select(t.faults.c.id).where(t.faults.c.pool == "faulty").with_for_update()
        )
        workers = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            _wait_for(
                lambda: _lock_waiters(engine) >= 2, 120, "both workers waiting on the fault row"
            )
        finally:
            holder.rollback()  # release the row: the two consumers race now
        outputs = [w.communicate(timeout=120) for w in workers]
    for w, (_out, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    fired = [json.loads(out.splitlines()[-1])["fired"] for out, _ in outputs]
    assert sorted(fired) == [False, True], f"a times: 1 fault fired {sum(fired)} times"
    assert sim.faults() == []  # consumed: gone from the pool
    engine.dispose()
