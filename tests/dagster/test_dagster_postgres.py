"""The PostgreSQL instance path (dagster-postgres, ``dagster-postgres.yaml``) on the real
server started by ``make test``: the Dagster instance and the product's tables share
one database, the product in its own schema; one transition run end to end."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster_support import make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.plans import plan_requests
from gps_dagster.demo.devserver import REPO, prepare_home

pytestmark = pytest.mark.postgres


def test_transition_run_on_the_postgres_instance(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "+psycopg2" in pg_url  # dagster-postgres under SQLAlchemy 2.1 needs it (FACTS.md)
    home = prepare_home(tmp_path / "dagster_home", REPO / "dagster-postgres.yaml")
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url)
    rt = make_runtime(pg_url)
    seed_schedule(rt)
    rt.clock.advance(5)
    defs = build_definitions(StaticRuntime(rt))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        (request,) = plan_requests(rt.engine.reconcile(trigger="sensor").plans)
        job = defs.resolve_job_def(request.job_name or "")
        result = job.execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance
        )
        assert result.success
        (run,) = instance.get_runs(dg.RunsFilter(tags={names.TAG_SCHEDULE: "gpu-pool-h100-shared"}))
        assert run.status == dg.DagsterRunStatus.SUCCESS
        starts = [
            e.dagster_event.step_key
            for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
            if e.dagster_event is not None
        ]
        assert [s for s in starts if s and s.startswith("release[")]
        assert [s for s in starts if s and s.startswith("capacity_wait[")]  # A waits for B's GPUs
    assert {r.deploy_id: r.phase for r in rt.store.list_status()} == {
        "md-qwen32b": "releasing",
        "md-llama70b": "capacity_wait",
    }
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        tables = set(
            conn.execute(
                sa.text("SELECT table_schema || '.' || table_name FROM information_schema.tables")
            ).scalars()
        )
    engine.dispose()
    assert "public.runs" in tables and "public.event_logs" in tables  # the Dagster instance
    assert {t.split(".")[0] for t in tables if "target_status" in t or t.endswith(".sim_pool")} == {
        "gps"
    }
    assert os.environ["DAGSTER_PG_URL"] == pg_url
