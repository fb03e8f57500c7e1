"""``clock_skew`` names the fast replica, not the healthy ones that notice (issue 25 #5).

Three real ``gps-dagster engine run --once`` processes on one PostgreSQL: one whose clock runs
fast serves the boundary early and stores its interval; the two healthy ones, behind that
interval, plan nothing (R-PASS-14) and report ``clock_skew`` naming the fast one — by its holder,
with its offset against the database's clock, recorded when it wrote the interval.

Every clock here is anchored on PostgreSQL's own (``Store.database_now``): a process's
``GPS_CLOCK`` is the database's instant read just before it starts, the fast one's shifted
ahead; so nothing depends on the wall clock of the test process (faketime included).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.store import Store
from tests.engine.night_fleet import night_pool, night_schedule

CLI = [
    sys.executable,
    "-m",
    "gps_dagster.cli.main",
    "engine",
    "run",
    "--once",
    "--frozen-clock-writes",
]
FAST_S = 60.0


def replica(url: str, pool: Path, clock: datetime) -> subprocess.Popen[str]:
    """A replica process whose clock reads ``clock`` (frozen: one pass)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPS_")}
    env.update(
        GPS_DB_URL=url, GPS_POOL_FILE=str(pool), GPS_BACKEND="sim", GPS_CLOCK=clock.isoformat()
    )
    return subprocess.Popen(CLI, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> str:
    """Wait for the replica; its holder name (``EngineConfig.holder``: host and pid)."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out, err)
    assert "Traceback" not in err, err
    return f"engine@{socket.gethostname()}:{proc.pid}"


def test_a_fast_replica_is_named_by_the_healthy_replicas_behind_it(
    pg_url: str, tmp_path: Path
) -> None:
    store = Store.open(pg_url)
    start = store.database_now()
    boundary = (start + timedelta(minutes=3)).replace(second=0, microsecond=0)  # 2-3 min ahead
    doc = night_schedule(0)
    doc["timezone"] = "UTC"
    doc["windows"][0].update(cron=f"{boundary.minute} {boundary.hour} * * *", duration="1h")
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(yaml.safe_dump(night_pool(1)))
    SimPool.create(store.engine, load_pool(night_pool(1)), VirtualClock(start))
    store.apply_schedule(load_schedule(doc), now=start)
    store.set_gate("enforce", now=start)

    # the fast replica: its clock is 60 s past the boundary when the database's is before it
    ahead_s = (boundary - store.database_now()).total_seconds() + FAST_S
    fast = finish(replica(pg_url, pool_file, store.database_now() + timedelta(seconds=ahead_s)))
    rows = store.list_status("s0000")
    assert {r.interval_start for r in rows} == {boundary}  # it served the boundary early
    assert {r.interval_writer for r in rows} == {fast}
    for r in rows:
        assert r.interval_writer_offset_s is not None
        assert r.interval_writer_offset_s > FAST_S - 1  # its offset, against PostgreSQL's clock

    # one after the other: run at once, one holds the pass lock and the other's sweep is busy
    observers = {finish(replica(pg_url, pool_file, store.database_now())) for _ in range(2)}
    assert store.database_now() < boundary - timedelta(seconds=5)  # they ran before it, truly
    events = [e for e in store.list_events("s0000", limit=1000) if e.kind == "clock_skew"]
    assert events, "the healthy replicas, behind the stored interval, report the skew"
    assert {e.deploy_id for e in events} == {"d0-a", "d0-b"}
    for e in events:
        assert e.detail is not None
        assert e.reason == "clock_ahead"
        assert e.detail["holder"] == fast and e.detail["holder"] not in observers
        assert e.detail["observer"] in observers
        assert e.detail["offset_s"] > FAST_S - 1
        # a frozen clock lags the database's by the process's start-up, never leads it
        assert -FAST_S < e.detail["observer_offset_s"] <= 0
        assert f"clock of {fast}" in e.detail["fix"]
    assert {e.detail["observer"] for e in events if e.detail} == observers
    assert {r.interval_start for r in store.list_status("s0000")} == {boundary}  # not undone
