"""Sensor and schedule ticks with ``instance_for_test`` on the virtual clock.

``evaluate_tick`` does not deduplicate run keys (only the daemon does,
FACTS.md): these tests assert the keys a tick emits; the end-to-end test under
``dagster dev`` asserts that the daemon launched one run per key.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import yaml
from dagster_support import EXAMPLES, Runtime, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.resources import as_resource
from gps_dagster.domain.spec import Schedule, TargetSpec
from gps_dagster.engine import EngineConfig
from gps_dagster.engine.engine import LOCK_NAME
from gps_dagster.engine.tick_cursors import parse_boundary_cursor

A, B = "md-llama70b", "md-qwen32b"
SEED = "gpu-pool-h100-shared"


def _tick(
    defs: dg.Definitions,
    rt: Runtime,
    instance: dg.DagsterInstance,
    name: str,
    cursor: str | None = None,
) -> Any:
    sensor = defs.resolve_sensor_def(name)
    ctx = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"gps": as_resource(rt)}
    )
    return sensor.evaluate_tick(ctx)


def _execute(
    defs: dg.Definitions, request: dg.RunRequest, instance: dg.DagsterInstance
) -> dg.ExecuteInProcessResult:
    job = defs.resolve_job_def(request.job_name or "")
    tags = dict(request.tags, **({"dagster/run_key": request.run_key} if request.run_key else {}))
    return job.execute_in_process(
        run_config=request.run_config, tags=tags, instance=instance, raise_on_error=False
    )


def _obs(result: Any) -> list[dg.AssetMaterialization]:
    """The deploys' status events (runless materializations: the Catalog shows them)."""
    return [e for e in result.asset_events if isinstance(e, dg.AssetMaterialization)]


def _checks(result: Any) -> list[dg.AssetCheckEvaluation]:
    """The deploys' phase checks (the schedules' automation check: test_catalog.py)."""
    return [
        e
        for e in result.asset_events
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == names.CHECK_DEPLOY_PHASE
    ]


def test_reconcile_sensor_launches_the_plan_with_a_deterministic_run_key(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    first = _tick(defs, rt, instance, names.RECONCILE_SENSOR)
    assert len(first.run_requests) == 1
    request = first.run_requests[0]
    transition = request.tags[names.TAG_TRANSITION]
    assert request.run_key == f"{transition}:plan"
    assert request.job_name == names.TRANSITION_JOB
    assert request.tags[names.TAG_SCHEDULE] == SEED
    observed = {e.metadata["deploy_id"].value: e.metadata["phase"].value for e in _obs(first)}
    assert set(observed) == {A, B}
    checks = {e.asset_key.to_user_string(): e.passed for e in _checks(first)}
    assert checks == {"deploy/md_llama70b": True, "deploy/md_qwen32b": True}  # pending: fine
    # The plan is still open and unexecuted: the next tick requests it again with the
    # same key (the daemon drops it); once its run executed, nothing is requested.
    again = _tick(defs, rt, instance, names.RECONCILE_SENSOR, first.cursor)
    assert [r.run_key for r in again.run_requests] == [request.run_key]
    assert not again.asset_events, "status unchanged: no new observation"
    assert _execute(defs, request, instance).success
    after = _tick(defs, rt, instance, names.RECONCILE_SENSOR, again.cursor)
    assert after.run_requests == []
    assert {e.metadata["deploy_id"].value for e in _obs(after)} == {A, B}
    assert "nothing to launch" in (after.skip_message or "")


def test_reconcile_sensor_pages_over_schedules_with_a_durable_cursor(
    sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = make_runtime(sqlite_url, config=EngineConfig(page_size=1))
    seed_schedule(rt)
    other = Schedule(
        name="embed",
        timezone="UTC",
        targets=(TargetSpec(model_deploy_id="md-bge-embed", default_state="running"),),
    )
    rt.store.apply_schedule(other, now=rt.clock.now())
    defs = build_definitions(StaticRuntime(rt))
    cursors, launched = [], []
    cursor = None
    for _ in range(3):
        result = _tick(defs, rt, instance, names.RECONCILE_SENSOR, cursor)
        cursor = result.cursor
        cursors.append(json.loads(cursor)["after"])
        launched.append([r.tags[names.TAG_SCHEDULE] for r in result.run_requests])
        rt.clock.advance(30)
    assert cursors == ["embed", SEED, ""]  # one schedule per tick, then the round starts over
    # both were just applied, so both are due at once whatever page the cursor is on (issue 13):
    # the seed's plan launches on the first tick ("embed" has nothing to do), and is requested
    # again with the same run key while it stays unexecuted
    assert launched[0] == [SEED]
    assert launched[1] == [SEED]
    assert rt.store.get_cursor() is None  # the engine's own durable cursor agrees


def test_capacity_wait_sensor_launches_the_acquire_when_it_fits(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    plan = _tick(defs, rt, instance, names.RECONCILE_SENSOR).run_requests[0]
    assert _execute(defs, plan, instance).success
    assert {r.deploy_id: r.phase for r in rt.store.list_status()}[A] == "capacity_wait"
    waiting = _tick(defs, rt, instance, names.CAPACITY_WAIT_SENSOR)
    assert waiting.run_requests == [] and waiting.skip_message
    rt.clock.advance(120)  # B's pods terminate (30 s), its GPUs are published (60 s)
    fits = _tick(defs, rt, instance, names.CAPACITY_WAIT_SENSOR)
    assert len(fits.run_requests) == 1
    acquire = fits.run_requests[0]
    transition = plan.tags[names.TAG_TRANSITION]
    assert acquire.run_key == f"{transition}:acquire:0"
    assert acquire.tags[names.TAG_PHASE] == "acquire" and acquire.tags[names.TAG_TARGETS] == A
    config = acquire.run_config["ops"]["plan"]["config"]
    assert config["release_steps"] == [] and [s["deploy_id"] for s in config["acquire_steps"]] == [
        A
    ]
    result = _execute(defs, acquire, instance)
    assert result.success
    assert not [e for e in result.all_events if (e.step_key or "").startswith("release[")]
    assert {r.deploy_id: r.phase for r in rt.store.list_status()}[A] in (
        "acquiring",
        "awaiting_ready",
    )
    rt.clock.advance(300)
    rt.engine.reconcile(trigger="sensor")
    assert {r.deploy_id: r.phase for r in rt.store.list_status()} == {
        A: "converged",
        B: "converged",
    }


def test_capacity_wait_times_out_to_capacity_unavailable(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    plan = _tick(defs, rt, instance, names.RECONCILE_SENSOR).run_requests[0]
    assert _execute(defs, plan, instance).success
    rt.clock.advance(120)
    rt.core.add_foreign("batch-intruder", 6, kind="static", node="hgx-01")  # takes B's freed GPUs
    assert _tick(defs, rt, instance, names.CAPACITY_WAIT_SENSOR).run_requests == []
    rt.clock.advance(timedelta(minutes=15))
    assert _tick(defs, rt, instance, names.CAPACITY_WAIT_SENSOR).run_requests == []
    status = {r.deploy_id: r for r in rt.store.list_status()}
    assert status[A].phase == "capacity_unavailable"
    assert status[A].fix
    assert rt.core.get_deploy(B).state.value == "STOPPED"  # B is not restarted automatically


def test_apply_now_sensor_serves_requests_and_answers_409_when_busy(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    first = rt.store.request_apply_now(SEED, now=rt.clock.now())
    result = _tick(defs, rt, instance, names.APPLY_NOW_SENSOR)
    assert [r.tags[names.TAG_TRIGGER] for r in result.run_requests] == ["apply_now"]
    assert rt.store.get_apply_now(first).result.startswith("200")
    assert _tick(defs, rt, instance, names.APPLY_NOW_SENSOR).skip_message  # nothing pending
    second = rt.store.request_apply_now(SEED, now=rt.clock.now())
    with rt.store.lock(LOCK_NAME, holder="another-engine", now=rt.clock.now()) as lock:
        assert lock.acquired
        busy = _tick(defs, rt, instance, names.APPLY_NOW_SENSOR)
    assert busy.run_requests == []
    assert rt.store.get_apply_now(second).result == "409 busy"


def test_boundary_schedules_fire_at_window_start_and_end(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    start = defs.resolve_schedule_def(names.boundary_schedule_name(SEED, "business-hours", "start"))
    end = defs.resolve_schedule_def(names.boundary_schedule_name(SEED, "business-hours", "end"))
    assert (start.cron_schedule, start.execution_timezone) == ("0 8 * * 1-5", "Asia/Ho_Chi_Minh")
    assert (end.cron_schedule, end.execution_timezone) == ("0 18 * * 1-5", "Asia/Ho_Chi_Minh")
    ctx = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=rt.clock.now(),
        resources={"gps": as_resource(rt)},
    )
    data = start.evaluate_tick(ctx)
    assert len(data.run_requests or []) == 1
    request = (data.run_requests or [])[0]
    assert request.tags[names.TAG_TRIGGER] == "boundary_start"
    assert _execute(defs, request, instance).success
    rt.clock.advance(timedelta(hours=10) - timedelta(minutes=1))
    rt.engine.reconcile(trigger="sensor")  # observes convergence; nothing new before 18:00
    rt.clock.advance(
        timedelta(minutes=1)
    )  # 18:00 +07: the end tick; the engine decides what changes
    ctx = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=rt.clock.now(),
        resources={"gps": as_resource(rt)},
    )
    data = end.evaluate_tick(ctx)
    assert [r.tags[names.TAG_TRIGGER] for r in data.run_requests or []] == ["boundary_end"]


def test_one_shot_windows_have_no_schedule_and_the_boundary_sensor_serves_them(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    scheduled = {s.name for s in defs.get_repository_def().schedule_defs}
    assert not [n for n in scheduled if "maint" in n]
    before = (rt.clock.now() - timedelta(minutes=1)).isoformat()
    result = _tick(defs, rt, instance, names.BOUNDARY_SENSOR, before)
    assert [r.tags[names.TAG_TRIGGER] for r in result.run_requests] == ["boundary"]
    assert parse_boundary_cursor(result.cursor) == (rt.clock.now(), None)
    quiet = _tick(defs, rt, instance, names.BOUNDARY_SENSOR, result.cursor)
    assert quiet.run_requests == []
    assert "nothing due (next pass due at" in (quiet.skip_message or "")


def test_reservation_partitions_follow_the_ledger(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    from gps_dagster.domain.gps.reservations import ReservationSpec
    from gps_dagster.store.reservations import ReservationRepository, ensure_tables

    assert _tick(defs, rt, instance, names.RESERVATION_SENSOR).skip_message
    spec = ReservationSpec.model_validate(
        yaml.safe_load((EXAMPLES / "gpu42-reservation.yaml").read_text())
    )
    ensure_tables(rt.store.engine)  # the ledger's tables (created by the GPS commands)
    ReservationRepository(rt.store.engine).create(
        spec, at=datetime(2026, 10, 19, tzinfo=UTC), actor="test"
    )
    result = _tick(defs, rt, instance, names.RESERVATION_SENSOR)
    (request,) = result.dynamic_partitions_requests
    assert isinstance(request, dg.AddDynamicPartitionsRequest)
    assert list(request.partition_keys) == ["rsv-gpu42-shared"]


def test_plan_left_pending_while_the_gate_was_off_is_resumed_once_enforcing(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    plan = _tick(defs, rt, instance, names.RECONCILE_SENSOR).run_requests[0]
    rt.store.set_gate("off", now=rt.clock.now())
    assert _execute(defs, plan, instance).success  # no submit with the gate off: steps stay pending
    assert {r.deploy_id: r.phase for r in rt.store.list_status()}[B] == "pending"
    again = _tick(defs, rt, instance, names.RECONCILE_SENSOR)
    assert [r.run_key for r in again.run_requests] == [
        plan.run_key
    ]  # dropped by the daemon: the run exists
    rt.store.set_gate("enforce", now=rt.clock.now())
    resumed = _tick(defs, rt, instance, names.RECONCILE_SENSOR).run_requests
    transition = plan.tags[names.TAG_TRANSITION]
    assert [r.run_key for r in resumed] == [f"{transition}:resume:1"]
    assert _execute(defs, resumed[0], instance).success
    assert {r.deploy_id: r.phase for r in rt.store.list_status()}[B] == "releasing"
    assert _tick(defs, rt, instance, names.RECONCILE_SENSOR).run_requests == []


def test_hourly_timeline_schedule_requests_the_hour_that_ended(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    schedule = defs.get_repository_def().get_schedule_def(names.TIMELINE_SCHEDULE)
    at = datetime(2026, 10, 19, 2, 1, tzinfo=UTC)
    ctx = dg.build_schedule_context(
        instance=instance, scheduled_execution_time=at, resources={"gps": as_resource(rt)}
    )
    assert instance.get_ref() is not None  # partitioned requests resolve through the instance ref
    (request,) = schedule.evaluate_tick(ctx).run_requests or []
    assert request.partition_key == "2026-10-19-01:00"
