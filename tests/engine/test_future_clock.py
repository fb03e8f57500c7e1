"""A stray future clock does not wedge targets (issue 25 #2b), on PostgreSQL.

A real ``gps-dagster engine run --once`` process with ``GPS_CLOCK`` at tomorrow 23:00 (an
operator's what-if left exported) plans the night swap of that future. Back in the present
(a replica on a clock 20 h earlier), time only moves forward (R-PASS-14): the present plans
nothing against the stored future interval — and says so, a ``clock_skew`` event with both
instants and the fix. Then one documented command (``schedules clear-skew``), or a new version
of the schedule, lets the present intent be planned again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from tests.engine.night_fleet import night_pool, night_schedule

NOW = datetime.fromisoformat("2026-10-19T03:00:00+07:00")  # inside last night's window
FUTURE = datetime.fromisoformat("2026-10-19T23:00:00+07:00")  # inside tonight's window
CLI = [sys.executable, "-m", "gps_dagster.cli.main"]


def cli(
    url: str, pool: Path, *args: str, clock: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPS_")}
    env.update(GPS_DB_URL=url, GPS_POOL_FILE=str(pool), GPS_BACKEND="sim")
    if clock is not None:
        env["GPS_CLOCK"] = clock
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def wedged_world(url: str, tmp: Path) -> tuple[Store, SimPool, VirtualClock, Engine, Path]:
    doc = night_pool(1)
    doc["deploys"][0]["state"], doc["deploys"][1]["state"] = "stopped", "running"  # 03:00 state
    pool_file = tmp / "pool.yaml"
    pool_file.write_text(yaml.safe_dump(doc))
    clock = VirtualClock(NOW)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(doc), clock)
    store.apply_schedule(load_schedule(night_schedule(0)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    # the present is the true time here: the database clock of the story (issue 25 #5)
    engine = Engine(store, pool, clock, EngineConfig(holder="present"), database_clock=clock)
    engine.run_pass()  # the present: the night intent, already in place
    assert {s.interval_start for s in store.list_status()} == {
        datetime.fromisoformat("2026-10-18T22:00:00+07:00")
    }
    before = store.list_status()
    stray = cli(url, pool_file, "engine", "run", "--once", clock=FUTURE.isoformat())
    assert stray.returncode == 1, stray.stderr  # refused: a frozen clock, not asked (#2a)
    assert "clock_frozen" in stray.stderr and "engine run --what-if" in stray.stderr
    assert "unset GPS_CLOCK" in stray.stderr and "Traceback" not in stray.stderr
    peek = cli(url, pool_file, "engine", "run", "--once", "--what-if", clock=FUTURE.isoformat())
    assert peek.returncode == 0, peek.stderr
    assert "s0000 v1: nothing to do" in peek.stdout, peek.stdout  # tonight: already in place
    assert store.list_status() == before and store.list_actions() == []  # nothing written
    # asked explicitly (as a replica whose clock runs 20 h fast would, unasked)
    stray = cli(
        url, pool_file, "engine", "run", "--once", "--frozen-clock-writes", clock=FUTURE.isoformat()
    )
    assert stray.returncode == 0, stray.stderr
    tonight = datetime.fromisoformat("2026-10-19T22:00:00+07:00")
    assert {s.interval_start for s in store.list_status()} == {tonight}
    clock.advance(30)
    report = engine.run_pass()  # the present again
    assert report.schedules and report.schedules[0].behind == ["d0-a", "d0-b"]
    assert report.plans == []
    skew = [e for e in store.list_events("s0000", limit=1000) if e.kind == "clock_skew"]
    assert skew and skew[-1].detail is not None
    assert datetime.fromisoformat(skew[-1].detail["stored_interval_start"]) == tonight
    assert datetime.fromisoformat(skew[-1].detail["replica_now"]) == clock.now()
    assert "gps-dagster schedules clear-skew s0000" in skew[-1].detail["fix"]
    return store, pool, clock, engine, pool_file


def present_planned(store: Store, engine: Engine, clock: VirtualClock) -> None:
    clock.advance(2)
    report = engine.run_pass()
    assert report.schedules[0].behind == []
    last_night = datetime.fromisoformat("2026-10-18T22:00:00+07:00")
    assert {s.interval_start for s in store.list_status()} == {last_night}


@pytest.mark.postgres
def test_the_documented_command_clears_a_stored_future_interval(
    pg_url: str, tmp_path: Path
) -> None:
    store, _, clock, engine, pool_file = wedged_world(pg_url, tmp_path)
    done = cli(pg_url, pool_file, "schedules", "clear-skew", "s0000", clock=clock.now().isoformat())
    assert done.returncode == 0, done.stderr
    assert "cleared the future intervals of d0-a, d0-b" in done.stdout
    present_planned(store, engine, clock)
    kinds = [e.kind for e in store.list_events("s0000", limit=1000)]
    assert kinds.count("clock_skew_cleared") == 2


@pytest.mark.postgres
def test_a_new_version_clears_a_stored_future_interval(pg_url: str, tmp_path: Path) -> None:
    store, _, clock, engine, _ = wedged_world(pg_url, tmp_path)
    doc = night_schedule(0)
    doc["windows"][0]["priority"] = 20  # the same intent, a new version
    assert store.apply_schedule(load_schedule(doc), now=clock.now()).version == 2
    present_planned(store, engine, clock)


@pytest.mark.postgres
def test_apply_now_on_a_frozen_clock_refuses_unless_asked(pg_url: str, tmp_path: Path) -> None:
    """Issue 25 #8, a sibling of #2a: the other command that submits steps from the CLI."""
    doc = night_pool(1)
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(yaml.safe_dump(doc))
    store = Store.open(pg_url)
    SimPool.create(store.engine, load_pool(doc), VirtualClock(NOW))
    store.apply_schedule(load_schedule(night_schedule(0)), now=NOW)
    store.set_gate("enforce", now=NOW)
    refused = cli(pg_url, pool_file, "apply-now", "s0000", clock=FUTURE.isoformat())
    assert refused.returncode == 1 and "clock_frozen" in refused.stderr, refused.stderr
    assert store.list_status() == [] and store.list_actions() == []
    queued = cli(pg_url, pool_file, "apply-now", "s0000", "--queue", clock=FUTURE.isoformat())
    assert queued.returncode == 0, (
        queued.stderr
    )  # a request only: the sensor serves it on its clock
