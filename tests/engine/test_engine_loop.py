"""The engine loop (``engine.loop.EngineLoop``; STYLE.md move 3; SPEC R-PASS-15; issue 9 §2.1).

One object runs the passes of ``engine run`` and of these tests: a clock and a
sleeper are injected (here a virtual clock and a sleeper that advances it), a
failed pass is logged and the next tick tries again — a real database outage
included (PostgreSQL refusing every connection to the test database) — and
``stop()`` ends it at once, as SIGTERM and SIGINT do for ``engine run``.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.reports import PassReport
from gps_dagster.store.errors import StoreUnavailable
from tests.engine.harness import A, B, C, World, a_running_pool, local, make_world, op_triples
from tests.engine.test_exception_owner import embed_nights

EVENING = local("2026-10-19T17:59:30")
ROOT = Path(__file__).resolve().parents[2]


def virtual_loop(w: World, **kw: Any) -> tuple[EngineLoop, list[PassReport], list[Exception]]:
    reports: list[PassReport] = []
    errors: list[Exception] = []
    loop = EngineLoop(
        w.engine,
        clock=w.clock,
        sleeper=w.clock.advance,
        interval_s=30,
        wake_at_boundaries=False,
        on_pass=reports.append,
        on_error=errors.append,
        **kw,
    )
    return loop, reports, errors


class Outage:
    """PostgreSQL refuses the test database: every session killed, no new one allowed."""

    def __init__(self, server_url: str, db_url: str) -> None:
        self.admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
        self.db = sa.engine.make_url(db_url).database

    def begin(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{self.db}" ALLOW_CONNECTIONS false'))
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :db AND pid <> pg_backend_pid()"
                ),
                {"db": self.db},
            )

    def end(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{self.db}" ALLOW_CONNECTIONS true'))
        self.admin.dispose()


@pytest.mark.postgres
def test_r_pass_15_the_loop_survives_a_database_outage_and_resumes(
    pg_server_url: str, pg_url: str
) -> None:
    w = make_world(pg_url, pool=a_running_pool(), start=EVENING)
    outage = Outage(pg_server_url, pg_url)
    loop, reports, errors = virtual_loop(w)

    def sleeper(seconds: float) -> None:
        w.clock.advance(seconds)
        if loop.passes == 2:  # after the 18:00 pass (A's stop accepted): the database goes away
            outage.begin()
        if loop.passes == 7:  # 18:03:00: it is back
            outage.end()

    loop.sleeper = sleeper
    assert loop.run(max_passes=24) == 24  # the loop never ended on its own
    assert len(errors) == 5 and all(isinstance(e, StoreUnavailable) for e in errors), errors
    # a temporary error with a fix, not a crash
    assert "store unavailable" in str(errors[0]) and errors[0].fix
    assert len(reports) == 19
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_2_1_a_pass_that_raises_does_not_end_the_loop(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    real = w.engine.run_pass
    calls = []

    def run_pass(**kw: Any) -> PassReport:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("pass bug")
        return real(**kw)

    w.engine.run_pass = run_pass  # type: ignore[method-assign]
    loop, _reports, errors = virtual_loop(w)
    assert loop.run(max_passes=20) == 20
    assert [str(e) for e in errors] == ["pass bug"] and loop.failures == 1
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_stop_from_another_thread_wakes_the_production_sleeper_at_once(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    loop = EngineLoop(
        w.engine,
        clock=w.clock,
        interval_s=3600,
        wake_at_boundaries=False,
        on_pass=lambda _r: threading.Thread(target=loop.stop).start(),
    )
    runner = threading.Thread(target=loop.run)
    runner.start()
    runner.join(timeout=10)  # the production sleeper waits 3600 s unless stop() wakes it
    assert not runner.is_alive()
    assert loop.passes == 1


def test_a_pass_asked_to_stop_ends_between_schedules_and_the_next_one_resumes_there(
    sqlite_url: str,
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.store.apply_schedule(load_schedule(embed_nights(EVENING)), now=EVENING)
    w.tick(30)  # 17:59:30
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 1  # let the first schedule through, then stop

    report = w.engine.run_pass(stop=stop)  # 18:00
    assert report.stopped and [s.schedule for s in report.schedules] == [w.spec.name]
    assert not [o for o in op_triples(w) if o[0] == C]
    due = w.store.due_at("zz-embed-nights")  # not visited: still due, and no longer claimed
    assert due is not None and due <= w.clock.now()
    assert w.engine.due_schedules(w.clock.now()) == ["zz-embed-nights"]
    nxt = w.engine.run_pass()
    assert nxt.schedules[0].schedule == "zz-embed-nights"
    assert (C, "stop") in [(d, k) for d, k, _ in op_triples(w)]


def test_next_wait_wakes_at_the_boundary_before_the_interval(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=local("2026-10-19T17:59:50"))
    loop = EngineLoop(w.engine, clock=w.clock, sleeper=w.clock.advance, interval_s=30)
    assert loop.next_wait() == 0.0  # just applied: due at once
    w.engine.run_pass()
    assert loop.next_wait() == 10.0  # 18:00 comes before the next tick
    assert (
        EngineLoop(w.engine, clock=w.clock, interval_s=30, wake_at_boundaries=False).next_wait()
        == 30.0
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_engine_run_stops_at_once_on_sigterm_and_sigint(
    tmp_path: Path, sig: signal.Signals
) -> None:
    env = {
        **os.environ,
        "GPS_DB_URL": f"sqlite:///{tmp_path / 'gps.sqlite'}",
        "PYTHONUNBUFFERED": "1",
        "GPS_POOL_FILE": str(ROOT / "examples" / "seed-pool-10.yaml"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gps_dagster.cli.main", "engine", "run", "--interval", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no pass within 120 s"
        first = proc.stdout.readline()  # type: ignore[union-attr]
        assert "gate=" in first, first
        proc.send_signal(sig)
        proc.wait(timeout=5)  # the loop sleeps 60 s between passes: it must not wait for them
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped" in err and "Traceback" not in err


def test_engine_run_without_its_database_says_so_in_one_line_not_a_traceback() -> None:
    from click.testing import CliRunner

    from gps_dagster.cli.main import cli

    result = CliRunner().invoke(
        cli, ["engine", "run", "--once", "--db", "postgresql://x@127.0.0.1:9/none"]
    )
    assert result.exit_code == 1, result.output
    assert "store_unavailable" in result.output and "fix:" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
