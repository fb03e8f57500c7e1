"""One real ``dagster dev`` (webserver + daemon) shared by the end-to-end and browser tests.

It runs over a temporary DAGSTER_HOME and product database, the demo pool
(compressed timings, wall clock) and a schedule whose one-shot window covers
now, so the intent differs from the pool from the first second. Before the
server starts, the test opens that transition with the engine and turns the
gate off: the reconcile sensor then requests the same plan on every tick and
the daemon must drop the repeats (run-key dedup only happens there).

The tests sharing it are independent of each other's order and worker: with
pytest 9.2, pytest-xdist 3.8's ``--dist loadgroup`` does not group (it sets
``item._nodeid``, which pytest 9.2 no longer reads), so each worker that gets
one of them starts its own server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_support import Server, schedule_file

from gps_dagster.demo.devserver import (
    REPO,
    DagsterDev,
    free_port,
    prepare_home,
    seed_database,
)


def _open_transition(db_url: str, pool_file: Path) -> str:
    from gps_dagster.runtime import build_runtime, settings_from_env

    rt = build_runtime(settings_from_env(backend="sim", db_url=db_url, pool_file=str(pool_file)))
    report = rt.engine.reconcile(trigger="sensor")
    assert len(report.plans) == 1, report
    rt.store.set_gate("off", now=rt.clock.now())
    rt.store.engine.dispose()
    return str(report.plans[0].transition_id)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("e2e")
    pool = REPO / "examples" / "demo-pool.yaml"
    db_url = f"sqlite:///{root / 'gps.sqlite'}"
    seed_database(
        db_url,
        pool_file=pool,
        schedule_files=[schedule_file(root / "schedule.json", datetime.now(UTC))],
    )
    transition = _open_transition(db_url, pool)
    home = prepare_home(root / "dagster_home")
    env = {"GPS_DB_URL": db_url, "GPS_POOL_FILE": str(pool), "GPS_RECONCILE_INTERVAL_S": "5"}
    dev = DagsterDev(dagster_home=home, env=env, port=free_port())
    artifacts = Path(os.environ.get("GPS_E2E_ARTIFACTS", REPO / "var" / "e2e"))
    artifacts.mkdir(parents=True, exist_ok=True)
    dev.start()
    try:
        dev.wait_ready(timeout=120)
        yield Server(dev, db_url, transition, artifacts)
    finally:
        left = dev.stop()
        assert not left, f"processes left behind: {left}"
