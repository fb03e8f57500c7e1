"""The store's edges: error translation, races, delete, pass lock, gate (issue 9 §2.9, 2.10, 2.12).

Races run on the real PostgreSQL server with two writers held inside their
transactions by a table lock the test owns, so the interleaving is the bad
one every time; outages are real (a database that refuses connections).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from gps_dagster.backends.sim import SimPool
from gps_dagster.cli.main import cli
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine.engine import LOCK_NAME
from gps_dagster.store import Store
from gps_dagster.store.errors import (
    ScheduleConflict,
    ScheduleInFlight,
    StoreUnavailable,
    TargetOwned,
)
from gps_dagster.store.locks import advisory_key
from tests.engine.harness import (
    A,
    B,
    a_running_pool,
    local,
    make_world,
    op_triples,
    run_for,
    seed_schedule,
)

EVENING = local("2026-10-19T17:59:30")
ROOT = Path(__file__).resolve().parents[2]


def waiting_on_locks(admin: sa.engine.Engine, db: str, n: int) -> None:
    """Block until ``n`` sessions of ``db`` wait on a lock (bounded: 600 polls)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock'"
    )
    for _ in range(600):
        with admin.connect() as conn:
            if conn.execute(query, {"db": db}).scalar_one() >= n:
                return
        time.sleep(0.1)
    raise AssertionError(f"{n} writers never met inside their transactions")


def race(pg_url: str, writers: list[Callable[[], Any]], *, sessions: int = 2) -> list[Any]:
    """Run ``writers`` at once, each held at the end of its transaction until all have started."""
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    holder = sa.create_engine(pg_url)
    results: list[Any] = [None] * len(writers)

    def run(i: int) -> None:
        try:
            results[i] = writers[i]()
        except Exception as exc:  # collected for the assertions
            results[i] = exc

    with holder.connect() as conn:
        # every apply ends with an event
        conn.execute(sa.text("LOCK TABLE gps.events IN ACCESS EXCLUSIVE MODE"))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writers))]
        for th in threads:
            th.start()
        waiting_on_locks(admin, sa.engine.make_url(pg_url).database or "", sessions)
        conn.rollback()
    for th in threads:
        th.join(timeout=60)
    admin.dispose()
    holder.dispose()
    return results


# -- 2.9: database errors translated at the store edge --------------------------------------------


@pytest.mark.postgres
def test_2_9_two_concurrent_creates_of_one_schedule_end_in_a_409_not_an_integrity_error(
    pg_url: str,
) -> None:
    store = Store.open(pg_url)
    spec = load_schedule(seed_schedule())
    results = race(pg_url, [lambda: store.apply_schedule(spec, now=EVENING)] * 2)
    won = [r for r in results if not isinstance(r, Exception)]
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(won) == 1 and won[0].version == 1
    assert len(lost) == 1 and isinstance(lost[0], ScheduleConflict), lost
    assert lost[0].http_status == 409 and "apply again" in lost[0].fix
    assert store.get_schedule(spec.name).version == 1


@pytest.mark.postgres
def test_2_9_two_schedules_racing_for_one_deploy_end_in_target_owned(pg_url: str) -> None:
    store = Store.open(pg_url)
    first = load_schedule(seed_schedule())
    doc = seed_schedule()
    doc["name"] = "thief"
    second = load_schedule(doc)
    results = race(
        pg_url,
        [
            lambda: store.apply_schedule(first, now=EVENING),
            lambda: store.apply_schedule(second, now=EVENING),
        ],
    )
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(lost) == 1 and isinstance(lost[0], TargetOwned) and lost[0].http_status == 409, (
        results
    )
    assert {store.owner_of(A), store.owner_of(B)} == {
        next(r.name for r in results if not isinstance(r, Exception))
    }


@pytest.mark.postgres
def test_2_9_the_cli_answers_a_create_race_with_exit_1_and_a_fix_never_a_traceback(
    pg_url: str, tmp_path: Path
) -> None:
    # migrated, and the pool loaded, before the race: only the creates race
    store = Store.open(pg_url)
    pool_file = ROOT / "examples" / "seed-pool-10.yaml"
    SimPool.create(
        store.engine,
        parse_pool(pool_file.read_text(), source=str(pool_file)),
        VirtualClock(EVENING),
    )
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(seed_schedule()))
    env = {
        **os.environ,
        "GPS_DB_URL": pg_url,
        "GPS_POOL_FILE": str(ROOT / "examples" / "seed-pool-10.yaml"),
    }
    cmd = [sys.executable, "-m", "gps_dagster.cli.main", "schedules", "apply", "-f", str(path)]

    def apply() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )

    results = race(pg_url, [apply, apply])
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1], [(r.returncode, r.stderr[-500:]) for r in results]
    loser = next(r for r in results if r.returncode == 1)
    assert "schedule_conflict" in loser.stderr and "fix:" in loser.stderr
    assert "Traceback" not in loser.stderr and "IntegrityError" not in loser.stderr


def test_2_9_a_database_that_cannot_be_reached_is_store_unavailable_a_temporary_error() -> None:
    with pytest.raises(StoreUnavailable) as err:
        Store.open("postgresql://nobody@127.0.0.1:9/none")  # nothing listens on port 9
    assert err.value.reason == "store_unavailable" and err.value.http_status == 503
    assert "Connection refused" in str(err.value) or "connect" in str(err.value)
    assert type(err.value.__cause__).__name__ == "OperationalError"  # the driver's error, chained


def test_2_9_a_sqlite_schema_error_is_not_taken_for_an_outage(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    with pytest.raises(sa.exc.OperationalError), store.engine.connect() as conn:
        conn.execute(sa.text("SELECT * FROM no_such_table"))


def test_2_9_an_interrupt_during_a_query_stays_an_interrupt(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)

    def interrupt(*_a: Any) -> None:
        raise KeyboardInterrupt

    sa.event.listen(store.engine, "before_cursor_execute", interrupt)
    with pytest.raises(KeyboardInterrupt):
        store.get_gate()


# -- 2.10: deleting a schedule with steps in flight ---------------------------------------------


def test_2_10_deleting_a_schedule_with_steps_in_flight_is_refused_with_a_fix(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    w.tick(30)  # 18:00: A's stop accepted, B's start waiting
    with pytest.raises(ScheduleInFlight) as err:
        w.store.delete_schedule(w.spec.name, now=w.clock.now())
    assert err.value.http_status == 409 and f"{A} stop (accepted)" in str(err.value)
    assert "disable it" in err.value.fix and "--force" in err.value.fix
    # nothing written
    assert w.store.find_schedule(w.spec.name) is not None and w.store.owner_of(A) == w.spec.name
    doc = seed_schedule()
    doc["enabled"] = False  # the fix: disable, wait for convergence, then delete
    w.apply(doc)
    run_for(w, 300)
    # still observed while disabled
    assert [a.state for a in w.store.list_actions(deploy_id=A)] == ["converged"]
    # never reached the core
    assert [a.state for a in w.store.list_actions(deploy_id=B)] == ["superseded"]
    assert w.store.delete_schedule(w.spec.name, now=w.clock.now()).abandoned == []
    assert w.store.owner_of(A) is None and [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]


def test_2_10_force_delete_ends_the_steps_it_abandons_so_nothing_is_in_flight_forever(
    sqlite_url: str,
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    w.tick(30)
    abandoned = w.store.delete_schedule(w.spec.name, now=w.clock.now(), force=True).abandoned
    assert abandoned == [f"{A} stop (accepted)"]
    assert not w.store.list_actions(states=("pending", "capacity_wait", "submitting", "accepted"))
    assert {a.reason for a in w.store.list_actions()} == {"schedule_deleted"}
    assert not w.store.list_transitions(states=("open",))
    event = [e for e in w.store.list_events(limit=1000) if e.kind == "schedule_deleted"][-1]
    assert event.detail == {"forced": True, "abandoned": abandoned}
    run_for(w, 300)  # the engine goes on without it
    assert w.deploy(A).state.value == "STOPPED" and len(op_triples(w)) == 1


def test_2_10_the_cli_refuses_the_delete_then_force_deletes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    w = make_world(url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    w.tick(30)
    refused = CliRunner().invoke(cli, ["schedules", "delete", w.spec.name, "--db", url])
    assert (
        refused.exit_code == 1
        and "schedule_in_flight" in refused.output
        and "--force" in refused.output
    )
    forced = CliRunner().invoke(cli, ["schedules", "delete", w.spec.name, "--db", url, "--force"])
    assert (
        forced.exit_code == 0 and "no longer tracked: md-llama70b stop (accepted)" in forced.output
    )


# -- 2.12: the pass lock and the gate -----------------------------------------------------------


@pytest.mark.postgres
def test_2_12_a_failing_advisory_unlock_ends_its_session_so_the_lock_is_not_kept_in_the_pool(
    pg_url: str,
) -> None:
    store = Store.open(pg_url)
    other = sa.create_engine(pg_url)

    def fail_unlock(conn: Any, cursor: Any, statement: str, *_a: Any) -> None:
        if "pg_advisory_unlock" in statement:
            raise RuntimeError("connection reset by peer")

    sa.event.listen(store.engine, "before_cursor_execute", fail_unlock)
    with store.lock(LOCK_NAME, holder="engine-1", now=EVENING) as lock:  # letting go must not raise
        assert lock.acquired
    sa.event.remove(store.engine, "before_cursor_execute", fail_unlock)
    with other.connect() as conn:
        got = conn.execute(
            sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": advisory_key(LOCK_NAME)}
        ).scalar()
        # the session that held it is gone: nobody keeps a stale lock in its pool
        assert got is True
        conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": advisory_key(LOCK_NAME)})
    other.dispose()
    with store.lock(LOCK_NAME, holder="engine-1", now=EVENING) as again:
        assert again.acquired


@pytest.mark.postgres
def test_2_12_a_lock_session_killed_during_the_pass_is_let_go_without_an_error(pg_url: str) -> None:
    store = Store.open(pg_url)
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with store.lock(LOCK_NAME, holder="engine-1", now=EVENING) as lock:
        assert lock.acquired and lock._conn is not None
        pid = lock._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    admin.dispose()
    with store.lock(LOCK_NAME, holder="engine-2", now=EVENING) as again:
        assert again.acquired


def test_2_12_an_unreadable_gate_fails_closed_with_a_log_and_an_event(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T18:00"))
    table = "gps.control" if db_url.startswith("postgresql") else "control"
    with w.store.engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {table} RENAME TO control_gone"))
    with caplog.at_level(logging.ERROR, logger="gps_dagster.engine.controls"):
        report = w.engine.run_pass()
    assert report.gate == "off" and op_triples(w) == []  # fail closed
    assert any("execution gate unreadable" in r.getMessage() for r in caplog.records)
    (event,) = [e for e in w.store.list_events(limit=1000) if e.kind == "gate_unreadable"]
    assert "control" in (event.detail or {})["error"]
