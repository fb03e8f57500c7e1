"""Compile tests: the code location loads, names and tags are as specified."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster_support import EXAMPLES, REPO, Runtime, faketime, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.assets import overcommit_check, placement_check
from gps_dagster.dagster_defs.batches import BATCH_JOB
from gps_dagster.dagster_defs.resources import as_resource
from gps_dagster.demo.devserver import materialize_timeline, prepare_home
from gps_dagster.domain.spec import TransitionOrder

SEED = "gpu-pool-h100-shared"
DAGSTER = str(Path(sys.executable).with_name("dagster"))


def test_definitions_name_every_job_sensor_schedule_and_asset(defs: dg.Definitions) -> None:
    repo = defs.get_repository_def()
    assert {j.name for j in repo.get_all_jobs() if not j.name.startswith("__")} == {
        names.TRANSITION_JOB,
        names.TRANSITION_JOB_ACQUIRE_FIRST,
        names.ACQUIRE_JOB,
        BATCH_JOB,
        names.TIMELINE_JOB,
        names.CHECKS_JOB,
        names.DEPLOY_CHECKS_JOB,
        names.PREARM_JOB,
    }
    assert {s.name for s in repo.sensor_defs} == {
        names.RECONCILE_SENSOR,
        names.BOUNDARY_SENSOR,
        names.CAPACITY_WAIT_SENSOR,
        names.APPLY_NOW_SENSOR,
        names.RESERVATION_SENSOR,
        names.PREARM_SENSOR,
    }
    # one-shot maint-wed has none: the boundary sensor serves it
    assert {s.name for s in repo.schedule_defs} == {
        names.boundary_schedule_name(SEED, "business-hours", "start"),
        names.boundary_schedule_name(SEED, "business-hours", "end"),
        names.TIMELINE_SCHEDULE,
        names.CHECKS_SCHEDULE,
    }
    # readable: no hash unless two names collide
    assert names.boundary_schedule_name(SEED, "business-hours", "start") == (
        "gpu_pool_h100_shared__business_hours__start"
    )
    reconcile = repo.get_sensor_def(names.RECONCILE_SENSOR)
    assert reconcile.minimum_interval_seconds == 30
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert keys == {
        names.RESERVATIONS_ASSET,
        names.TIMELINE_ASSET,
        "deploy/md_llama70b",
        "deploy/md_qwen32b",
        "schedule/gpu_pool_h100_shared",  # upstream of its deploys (lineage.py)
    }  # C (md-bge-embed) is in no schedule: no asset
    checks = {(k.asset_key.to_user_string(), k.name) for k in repo.asset_graph.asset_check_keys}
    assert checks == {
        (names.RESERVATIONS_ASSET, names.CHECK_PLACEMENT),
        (names.RESERVATIONS_ASSET, names.CHECK_OVERCOMMIT),
        ("deploy/md_llama70b", names.CHECK_DEPLOY_PHASE),
        ("deploy/md_qwen32b", names.CHECK_DEPLOY_PHASE),
        ("schedule/gpu_pool_h100_shared", names.CHECK_AUTOMATION),
    }
    group = {
        k.to_user_string(): repo.asset_graph.get(k).group_name
        for k in repo.asset_graph.get_all_asset_keys()
    }
    assert group["deploy/md_llama70b"] == group["deploy/md_qwen32b"] == "gpu_pool_h100_shared"


def test_transition_jobs_use_the_in_process_executor(defs: dg.Definitions) -> None:
    job = defs.resolve_job_def(names.TRANSITION_JOB)
    assert job.executor_def.name == "in_process"
    admission = {"admit", "acquire", "capacity_wait"}
    assert {n.name for n in job.graph.nodes} == {
        "plan",
        "release",
        "all_released",
        "done",
        *admission,
    }
    # the order itself is asserted on executed runs (test_dagster_job.py)
    mirror = defs.resolve_job_def(names.TRANSITION_JOB_ACQUIRE_FIRST)
    assert {n.name for n in mirror.graph.nodes} == {
        "plan",
        "all_acquired",
        "release",
        "done",
        *admission,
    }
    acquire = defs.resolve_job_def(names.ACQUIRE_JOB)  # no release op: its Gantt shows the acquire
    assert {n.name for n in acquire.graph.nodes} == {"plan", "done", *admission}


def test_acquire_first_schedules_target_the_mirror_job(rt: Runtime) -> None:
    spec = rt.store.get_schedule(SEED).spec.model_copy(
        update={"transition_order": TransitionOrder.ACQUIRE_FIRST}
    )
    defs = build_definitions(StaticRuntime(rt), schedules=[spec])
    boundary = [s for s in defs.get_repository_def().schedule_defs if s.name.startswith("gpu_pool")]
    assert {s.job_name for s in boundary} == {names.TRANSITION_JOB_ACQUIRE_FIRST}


def test_asset_checks_report_no_reservation_honestly(rt: Runtime) -> None:
    for check in (placement_check, overcommit_check):
        result = check(dg.build_asset_check_context(resources={"gps": as_resource(rt)}))
        assert result.passed
        assert result.description == "no reservation in the ledger: nothing to check"
        assert result.metadata["reservations"].value == 0


AFTER_THE_WEEK = datetime(2026, 10, 26, 2, tzinfo=UTC)
"""Monday after the seed week, 09:00 +07: every hourly partition of the week has ended."""


def _env(tmp_path: Path) -> dict[str, str]:
    home = prepare_home(tmp_path / "dagster_home")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "GPS_DB_URL": f"sqlite:///{tmp_path / 'gps.sqlite'}",
        "GPS_POOL_FILE": str(EXAMPLES / "seed-pool-10.yaml"),
        "GPS_CLOCK": AFTER_THE_WEEK.isoformat(),  # the code location's runtime: a virtual clock
    }


def test_dagster_definitions_validate_loads_the_code_location(tmp_path: Path) -> None:
    env = _env(tmp_path)
    seed_schedule(make_runtime(env["GPS_DB_URL"]))
    out = subprocess.run(
        [DAGSTER, "definitions", "validate", "-f", str(REPO / "definitions.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr


def test_cli_backfills_a_week_of_timeline_in_one_run(tmp_path: Path) -> None:
    env = _env(tmp_path)
    seed_schedule(make_runtime(env["GPS_DB_URL"]))
    # Dagster refuses partitions that have not ended by its own (wall-clock) now: give its CLI
    # a clock that starts after the week, so the test passes at any real instant.
    done = materialize_timeline(
        env, "2026-10-19-00:00", "2026-10-25-23:00", command_prefix=faketime(AFTER_THE_WEEK)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs()
        assert len(runs) == 1
        assert runs[0].tags["dagster/asset_partition_range_start"] == "2026-10-19-00:00"
        key = dg.AssetKey(names.TIMELINE_ASSET)
        partitions = instance.get_materialized_partitions(key)
        assert len(partitions) == 7 * 24
        event = instance.get_latest_materialization_event(key)
        assert event is not None and event.asset_materialization is not None
        meta = event.asset_materialization.metadata
        assert meta["capacity"].value == 10
        assert (
            meta["peak_desired_gpus"].value == 10
        )  # A 8 + C 2 in business hours: never above the pool
        assert meta["overcommit_segments"].value == 0


@pytest.mark.parametrize("path", [EXAMPLES / "demo-schedule.json"])
def test_demo_schedule_compiles_into_boundary_schedules(path: Path, sqlite_url: str) -> None:
    rt = make_runtime(sqlite_url, pool_file=EXAMPLES / "demo-pool.yaml")
    seed_schedule(rt, path)
    repo = build_definitions(StaticRuntime(rt)).get_repository_def()
    crons = {
        s.name.rsplit("__", 1)[1]: s.cron_schedule
        for s in repo.schedule_defs
        if s.name.startswith("demo_swap__")
    }
    every_4 = ",".join(str(m) for m in range(0, 60, 4))
    two_later = ",".join(str(m) for m in range(2, 60, 4))
    assert crons == {"start": f"{every_4} * * * *", "end": f"{two_later} * * * *"}


def test_reservation_checks_job_runs_the_checks_without_materialising(
    defs: dg.Definitions, instance: dg.DagsterInstance
) -> None:
    job = defs.resolve_job_def(names.CHECKS_JOB)
    result = job.execute_in_process(instance=instance)
    assert result.success
    evaluations = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert {e.event_specific_data.check_name for e in evaluations} == {
        names.CHECK_PLACEMENT,
        names.CHECK_OVERCOMMIT,
    }  # type: ignore[union-attr]
    assert not [e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]


def _start(rt: Runtime, deploy_id: str) -> None:
    view = rt.core.get_deploy(deploy_id)
    rt.core.start(deploy_id, etag=view.etag, idempotency_key=f"test-start-{deploy_id}")


def test_asset_checks_report_the_ledger_per_reservation_and_catch_a_misplaced_pod(
    sqlite_url: str,
) -> None:
    from gps_dagster.domain.pool import FaultSpec

    rt = make_runtime(sqlite_url, pool_file=EXAMPLES / "gpu42-pool.yaml")
    ctx = dg.build_asset_check_context(resources={"gps": as_resource(rt)})
    rt.clock.advance(300)  # the members the pool file starts are READY
    placed, budget = placement_check(ctx), overcommit_check(ctx)
    assert placed.passed and budget.passed
    assert placed.metadata["reservations"].value == 1
    assert "rsv-gpu42-shared" in placed.metadata
    assert "within budget" in budget.description

    stopped = [
        d.id for d in rt.core.reservation_deploys("rsv-gpu42-shared") if d.state.value == "STOPPED"
    ]
    assert stopped, "the gpu42 pool starts with one member stopped"
    rt.core.inject_fault(FaultSpec(effect="misplace", deploy=stopped[0]))
    running = [
        d for d in rt.core.reservation_deploys("rsv-gpu42-shared") if d.state.value != "STOPPED"
    ]
    view = rt.core.get_deploy(running[0].id)
    rt.core.stop(
        running[0].id, etag=view.etag, allow_aliased_downtime=True, idempotency_key="test-make-room"
    )
    rt.clock.advance(120)
    _start(rt, stopped[0])
    rt.clock.advance(300)
    placed = placement_check(ctx)
    assert not placed.passed
    assert placed.description.startswith("placement_mismatch")
    assert placed.metadata["failed"].value == 1
