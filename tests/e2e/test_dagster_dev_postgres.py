"""``dagster dev`` on the PostgreSQL instance (dagster-postgres.yaml, ``+psycopg2``): the
reconcile sensor launches a transition run that completes (NOT_STARTED would mean the
NOTIFY path is broken), and the product's tables share the database in schema ``gps``."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_support import SCHEDULE, schedule_file

from gps_dagster.dagster_defs import names
from gps_dagster.demo.devserver import (
    REPO,
    DagsterDev,
    free_port,
    prepare_home,
    seed_database,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.xdist_group(name="dagster_dev_pg"),
]


def test_transition_run_under_dagster_dev_on_postgres(pg_url: str, tmp_path: Path) -> None:
    pool = REPO / "examples" / "demo-pool.yaml"
    seed_database(
        pg_url,
        pool_file=pool,
        schedule_files=[schedule_file(tmp_path / "s.json", datetime.now(UTC))],
    )
    home = prepare_home(tmp_path / "dagster_home", REPO / "dagster-postgres.yaml")
    env = {
        "DAGSTER_PG_URL": pg_url,
        "GPS_DB_URL": pg_url,
        "GPS_POOL_FILE": str(pool),
        "GPS_RECONCILE_INTERVAL_S": "5",
    }
    dev = DagsterDev(dagster_home=home, env=env, port=free_port())
    dev.start()
    try:
        dev.wait_ready(timeout=120)
        deadline = time.monotonic() + 90
        runs: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            runs = dev.runs_by_tag(names.TAG_SCHEDULE, SCHEDULE)
            if any(r["status"] == "SUCCESS" for r in runs):
                break
            time.sleep(1)
        assert any(r["status"] == "SUCCESS" for r in runs), f"runs: {runs}\n{dev.log_tail()}"
        assert {r["jobName"] for r in runs} == {names.TRANSITION_JOB}
    finally:
        left = dev.stop()
    assert left == []
