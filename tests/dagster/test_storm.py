"""A storm through Dagster: the plans of one tick in one batch run; a large fleet's boundaries
through one every-minute schedule instead of a Dagster schedule per window (issue 13)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster_support import MONDAY_0800, Daemon, make_runtime, seed_schedule
from pair_fleet import pair_pool, pair_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.batches import BATCH_JOB, BATCH_THRESHOLD
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.spec import TransitionOrder
from gps_dagster.engine.tick_cursors import parse_boundary_cursor

PAIRS = BATCH_THRESHOLD + 4


def _fleet(tmp_path: Path, url: str, stop_grace_s: float = 0) -> Any:
    """PAIRS schedules, each swapping its own pair on its own node at 08:00 +07."""
    pool = pair_pool(PAIRS, stop_grace_s=stop_grace_s)
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    rt = make_runtime(
        url, pool_file=tmp_path / "pool.yaml", start=MONDAY_0800 - timedelta(minutes=5)
    )
    for i in range(PAIRS):
        doc = pair_schedule(i, name=f"team-{i}")
        rt.store.apply_schedule(parse_schedule(json.dumps(doc), source="fleet"), now=rt.clock.now())
    rt.engine.reconcile(trigger="sensor")  # 07:55: the fleet is at its intent
    return rt


def test_a_storm_of_plans_is_one_batch_run_and_one_failure_ends_only_its_plan(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = _fleet(tmp_path, sqlite_url)
    defs = build_definitions(StaticRuntime(rt))
    daemon = Daemon(defs, rt, instance)
    daemon.evaluate_sensor(names.BOUNDARY_SENSOR)  # 07:55: nothing due yet
    rt.core.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy="b3", error="permanent"))
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1))
    requests = daemon.evaluate_sensor(names.BOUNDARY_SENSOR)
    (batch,) = requests  # not PAIRS runs queued behind max_concurrent_runs
    assert batch.job_name == BATCH_JOB and batch.tags[names.TAG_PLANS] == str(PAIRS)
    (result,) = daemon.submit(requests, sensor=names.BOUNDARY_SENSOR)
    assert not result.success  # batch_done names the failed step, after every other plan ran
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failure] == ["batch_done"] and "b3" in str(
        failure[0].event_specific_data
    )
    states = {a.deploy_id: a.state for a in rt.store.list_actions()}
    assert states.pop("b3") == "failed" and states.pop("a3") == "cancelled"
    assert {states[f"b{i}"] for i in range(PAIRS) if i != 3} == {"accepted"}
    assert {states[f"a{i}"] for i in range(PAIRS) if i != 3} == {"accepted"}
    # no other origin launches a batched plan again: its claim names the batch
    rt.clock.advance(600)
    assert not [
        r
        for r in daemon.evaluate_sensor(names.RECONCILE_SENSOR)
        if r.run_key and r.run_key.endswith(":plan")
    ]


def test_a_large_fleet_gets_one_every_minute_schedule_that_serves_every_boundary(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = _fleet(tmp_path, sqlite_url)
    defs = build_definitions(StaticRuntime(rt), max_boundary_schedules=2 * PAIRS - 1)
    boundary = {s.name for s in defs.get_repository_def().schedule_defs} - {
        names.TIMELINE_SCHEDULE,
        names.CHECKS_SCHEDULE,
    }
    assert boundary == {names.MINUTE_SCHEDULE}  # not 2 * PAIRS Dagster schedules
    daemon = Daemon(defs, rt, instance)
    early = defs.resolve_schedule_def(names.MINUTE_SCHEDULE).evaluate_tick(
        dg.build_schedule_context(
            instance=instance, resources={"gps": _res(rt)}, scheduled_execution_time=rt.clock.now()
        )
    )
    assert "Next: team-0 at 2026-10-19T01:00:00+00:00" in (early.skip_message or "")
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1.5))
    (batch,) = daemon.evaluate_schedule(names.MINUTE_SCHEDULE, MONDAY_0800)
    assert batch.job_name == BATCH_JOB and batch.tags[names.TAG_PLANS] == str(PAIRS)
    (result,) = daemon.submit([batch], schedule=names.MINUTE_SCHEDULE, at=MONDAY_0800)
    assert result.success
    assert {a.state for a in rt.store.list_actions()} == {"accepted"}


def _res(rt: Any) -> Any:
    from gps_dagster.dagster_defs.resources import as_resource

    return as_resource(rt)


@pytest.mark.parametrize("limit", [200])
def test_a_small_fleet_keeps_readable_per_window_schedules(limit: int, rt: Any) -> None:
    seed_schedule(rt)
    names_ = {
        s.name
        for s in build_definitions(StaticRuntime(rt), max_boundary_schedules=limit)
        .get_repository_def()
        .schedule_defs
    }
    assert "gpu_pool_h100_shared__business_hours__start" in names_
    assert names.MINUTE_SCHEDULE not in names_


def test_the_acquires_a_storm_deferred_are_one_batch_run_too(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = _fleet(tmp_path, sqlite_url, stop_grace_s=60)
    defs = build_definitions(StaticRuntime(rt))
    daemon = Daemon(defs, rt, instance)
    daemon.evaluate_sensor(names.BOUNDARY_SENSOR)
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1))
    daemon.submit(daemon.evaluate_sensor(names.BOUNDARY_SENSOR), sensor=names.BOUNDARY_SENSOR)
    waiting = [a for a in rt.store.list_actions() if a.state == "capacity_wait"]
    assert len(waiting) == PAIRS  # every A waits for its B's GPUs
    rt.clock.advance(61)
    (batch,) = daemon.evaluate_sensor(names.CAPACITY_WAIT_SENSOR)  # not PAIRS acquire runs
    assert batch.job_name == BATCH_JOB and batch.tags[names.TAG_PHASE] == "acquire_batch"
    (result,) = daemon.submit([batch], sensor=names.CAPACITY_WAIT_SENSOR)
    assert result.success
    assert {a.state for a in rt.store.list_actions() if a.order == "acquire"} == {"accepted"}


def test_a_large_fleet_gets_lean_deploy_assets_and_keeps_every_phase_check(rt: Any) -> None:
    from gps_dagster.dagster_defs.deploys import LEAN_ABOVE

    specs = []
    for i in range(LEAN_ABOVE // 2 + 1):
        doc = {
            "name": f"t-{i}",
            "timezone": "UTC",
            "targets": [
                {"model_deploy_id": f"a{i}", "default_state": "stopped"},
                {"model_deploy_id": f"b{i}", "default_state": "running"},
            ],
        }
        specs.append(parse_schedule(json.dumps(doc), source="fleet"))
    repo = build_definitions(StaticRuntime(rt), schedules=specs).get_repository_def()
    deploys = [k for k in repo.asset_graph.get_all_asset_keys() if k.path[0] == "deploy"]
    assert len(deploys) == 2 * len(specs) > LEAN_ABOVE
    assert repo.asset_graph.get(deploys[0]).description is None  # lean: no per-asset text
    checks = [k for k in repo.asset_graph.asset_check_keys if k.name == names.CHECK_DEPLOY_PHASE]
    assert len(checks) == len(deploys)  # every deploy still has its phase check
    assert names.DEPLOY_CHECKS_JOB not in {j.name for j in repo.get_all_jobs()}


# -- the due index behind the boundary sensor and the every-minute schedule ---------------------


def _no_scan(rt: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Make a scan of every schedule fail loudly; record which specs a tick reads."""

    def scan(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a boundary tick listed every schedule")

    monkeypatch.setattr(rt.store, "list_schedules", scan)
    read: list[list[str]] = []
    named = rt.store.schedules_named

    def spy(names_: Any) -> Any:
        read.append(list(names_))
        return named(names_)

    monkeypatch.setattr(rt.store, "schedules_named", spy)
    return read


def test_the_boundary_tick_reads_only_the_due_schedules_through_the_index(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = _fleet(tmp_path, sqlite_url)
    rt.store.apply_schedule(  # an idle schedule, never due before next year
        parse_schedule(
            json.dumps(
                {
                    "name": "idle",
                    "timezone": "UTC",
                    "targets": [{"model_deploy_id": "x0", "default_state": "stopped"}],
                }
            ),
            source="t",
        ),
        now=rt.clock.now(),
    )
    rt.engine.reconcile(trigger="sensor")
    defs = build_definitions(StaticRuntime(rt))
    daemon = Daemon(defs, rt, instance)
    read = _no_scan(rt, monkeypatch)
    rt.clock.set(MONDAY_0800 - timedelta(seconds=30))
    assert daemon.evaluate_sensor(names.BOUNDARY_SENSOR) == []
    assert read == []  # nothing due: no spec parsed at all
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1))
    (batch,) = daemon.evaluate_sensor(names.BOUNDARY_SENSOR)
    assert batch.job_name == BATCH_JOB and batch.tags[names.TAG_PLANS] == str(PAIRS)
    assert sorted(n for batch_ in read for n in batch_) == sorted(f"team-{i}" for i in range(PAIRS))


def _skip(defs: dg.Definitions, rt: Any, instance: dg.DagsterInstance, cursor: str | None) -> Any:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"gps": _res(rt)})
    return defs.resolve_sensor_def(names.BOUNDARY_SENSOR).evaluate_tick(ctx)


@pytest.mark.parametrize("down_until", [None, MONDAY_0800 + timedelta(seconds=30)])
def test_a_boundary_missed_while_the_sensor_was_down_is_served_on_its_next_tick(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance, down_until: Any
) -> None:
    """The cursor (a fresh instance: none; or a tick just after the boundary that served
    nothing) does not decide what is due: the index does."""
    rt = _fleet(tmp_path, sqlite_url)
    defs = build_definitions(StaticRuntime(rt))
    rt.clock.set(MONDAY_0800 + timedelta(minutes=1))
    cursor = down_until.isoformat() if down_until else None
    result = _skip(defs, rt, instance, cursor)
    (batch,) = result.run_requests
    assert batch.job_name == BATCH_JOB and batch.tags[names.TAG_PLANS] == str(PAIRS)
    assert parse_boundary_cursor(result.cursor) == (rt.clock.now(), None)


def test_a_storm_is_served_by_one_claimed_pass_even_while_another_pass_holds_the_lock(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gps_dagster.engine.engine import LOCK_NAME

    rt = _fleet(tmp_path, sqlite_url)
    defs = build_definitions(StaticRuntime(rt))

    def per_schedule(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a storm served by one locked pass per schedule")

    monkeypatch.setattr(rt.engine, "reconcile", per_schedule)
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1))
    with rt.store.lock(LOCK_NAME, holder="the-reconcile-sensor", now=rt.clock.now()) as lock:
        assert lock.acquired
        result = _skip(defs, rt, instance, (MONDAY_0800 - timedelta(seconds=1)).isoformat())
    (batch,) = result.run_requests  # not "another pass holds the lock: retried next tick"
    assert batch.tags[names.TAG_PLANS] == str(PAIRS)


def test_in_flight_follow_ups_launch_nothing_twice_and_say_so_in_one_line(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = _fleet(tmp_path, sqlite_url, stop_grace_s=60)
    defs = build_definitions(StaticRuntime(rt))
    daemon = Daemon(defs, rt, instance)
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1))
    (batch,) = daemon.evaluate_sensor(names.BOUNDARY_SENSOR)
    rt.clock.advance(3)  # the batch run is still queued: every plan's steps are pending
    assert rt.engine.due_schedules(rt.clock.now(), 100)  # the index follows them up
    queued = _skip(defs, rt, instance, daemon.cursors[names.BOUNDARY_SENSOR])
    assert queued.run_requests == []
    assert (
        f"{PAIRS} schedule(s) due, no new plan (intent met, or steps in flight): team-0, "
        "team-1, team-10, team-11, team-2, …" in (queued.skip_message or "")
    )
    daemon.submit([batch], sensor=names.BOUNDARY_SENSOR)
    for _ in range(3):  # steps accepted / in capacity wait: followed up, never relaunched
        rt.clock.advance(3)
        assert daemon.evaluate_sensor(names.BOUNDARY_SENSOR) == []
    assert len(instance.get_runs()) == 1


def test_the_every_minute_schedule_names_the_next_due_passes_from_the_index(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = _fleet(tmp_path, sqlite_url)
    defs = build_definitions(StaticRuntime(rt), max_boundary_schedules=2 * PAIRS - 1)
    _no_scan(rt, monkeypatch)
    minute = defs.resolve_schedule_def(names.MINUTE_SCHEDULE)
    early = minute.evaluate_tick(
        dg.build_schedule_context(
            instance=instance, resources={"gps": _res(rt)}, scheduled_execution_time=rt.clock.now()
        )
    )
    assert "Next: team-0 at 2026-10-19T01:00:00+00:00, team-1 at" in (early.skip_message or "")


def test_the_every_minute_schedule_leaves_an_acquire_first_plan_to_the_reconcile_sensor(
    tmp_path: Path, sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    """It can only launch the batch job: claiming a launch it cannot make held the plan back
    from the reconcile sensor until the claim's takeover (2 minutes)."""
    rt = _fleet(tmp_path, sqlite_url)
    spec = rt.store.get_schedule("team-0").spec
    rt.store.apply_schedule(
        spec.model_copy(update={"transition_order": TransitionOrder.ACQUIRE_FIRST}),
        now=rt.clock.now(),
    )
    rt.engine.reconcile(trigger="sensor")
    defs = build_definitions(StaticRuntime(rt), max_boundary_schedules=2 * PAIRS - 1)
    daemon = Daemon(defs, rt, instance)
    rt.clock.set(MONDAY_0800 + timedelta(seconds=1))
    (batch,) = daemon.evaluate_schedule(names.MINUTE_SCHEDULE, MONDAY_0800)
    assert batch.tags[names.TAG_PLANS] == str(PAIRS - 1)
    rt.clock.advance(2)
    (plan,) = [
        r
        for r in daemon.evaluate_sensor(names.RECONCILE_SENSOR)
        if r.tags.get(names.TAG_SCHEDULE) == "team-0"
    ]
    assert plan.job_name == names.TRANSITION_JOB_ACQUIRE_FIRST
