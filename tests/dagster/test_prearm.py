"""Pre-armed runs (issue 20 §1): launched ahead of the boundary, the plan opened at it.

The run waits for the boundary on the runtime's (virtual) clock, then opens and fences the plan
exactly at the boundary instant: its release is submitted at 08:00:00.000 whatever the run's
start-up cost, and the acquire follows in the same run. An edit made while it waited is seen;
a plan another origin launched first ends the run skipped with the reason; a pre-armed run
that never ran leaves the boundary to today's path."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest
from dagster_support import MONDAY_0800, Daemon, Runtime, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.prearm import prearm_run_key

A, B = "md-llama70b", "md-qwen32b"
SEED = "gpu-pool-h100-shared"
AHEAD = 20.0


@pytest.fixture
def early(sqlite_url: str) -> Runtime:
    """The seed at Monday 07:59:40 +07, 20 s before business hours start."""
    rt = make_runtime(sqlite_url, start=MONDAY_0800 - timedelta(seconds=AHEAD))
    seed_schedule(rt)
    return rt


def _daemon(rt: Runtime, instance: dg.DagsterInstance, lead: float = 30.0) -> Daemon:
    served = StaticRuntime(rt, capacity_poll_s=120, sleeper=rt.clock.advance, prearm_lead_s=lead)
    daemon = Daemon(build_definitions(served), served, instance)
    return daemon


def _steps(result: dg.ExecuteInProcessResult, kind: str) -> list[str]:
    return [
        (e.step_key or "").split("[")[0] for e in result.all_events if e.event_type_value == kind
    ]


def test_the_sensor_launches_a_run_ahead_of_a_boundary_within_the_lead_only(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = _daemon(early, instance, lead=10.0)
    assert daemon.evaluate_sensor(names.PREARM_SENSOR) == []  # 20 s ahead, lead 10 s
    early.clock.advance(11)
    (request,) = daemon.evaluate_sensor(names.PREARM_SENSOR)
    assert request.job_name == names.PREARM_JOB
    assert request.run_key == prearm_run_key(SEED, MONDAY_0800)
    assert request.tags[names.TAG_BOUNDARY] == MONDAY_0800.isoformat()


def test_a_pre_armed_run_submits_the_release_at_the_boundary_and_acquires_in_the_same_run(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = _daemon(early, instance)
    (result,) = daemon.tick_sensor(names.PREARM_SENSOR)
    assert result.success
    (stop_b,) = early.store.list_actions(deploy_id=B)
    (start_a,) = early.store.list_actions(deploy_id=A)
    assert stop_b.submitted_at == MONDAY_0800  # fenced and submitted at the boundary instant
    assert stop_b.interval_start == MONDAY_0800
    assert start_a.state == "accepted"  # the capacity published within the admit's watch
    assert {"arm", "release", "all_released", "admit", "acquire", "done"} <= set(
        _steps(result, "STEP_SUCCESS")
    )
    tags = instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
    assert tags[names.TAG_TRANSITION] == stop_b.transition_id  # the plan's tags, on this run
    assert tags[names.TAG_PREARM] == f"serving {stop_b.transition_id}"
    # one run for the swap: neither the boundary sensor nor the reconcile sensor launches another
    assert daemon.tick_sensor(names.BOUNDARY_SENSOR) == []
    assert daemon.tick_sensor(names.RECONCILE_SENSOR) == []


def test_an_edit_while_the_run_waits_is_seen_at_the_boundary_and_the_run_ends_skipped(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = _daemon(early, instance)
    requests = daemon.evaluate_sensor(names.PREARM_SENSOR)
    seed_schedule(early, windows=[])  # edited while the run waits: no window any more
    (result,) = daemon.submit(requests, sensor=names.PREARM_SENSOR)
    assert result.success
    assert _steps(result, "STEP_SUCCESS") == ["arm"]
    assert not early.store.list_actions()  # nothing planned, nothing submitted
    tags = instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
    assert tags[names.TAG_PREARM].startswith("skipped: no new plan at ")


def test_a_plan_launched_first_by_the_boundary_sensor_ends_the_pre_armed_run_skipped(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = _daemon(early, instance)
    requests = daemon.evaluate_sensor(names.PREARM_SENSOR)
    early.clock.advance(AHEAD + 1)  # the pre-armed run started late; the sensor served it
    (plan_run,) = daemon.tick_sensor(names.BOUNDARY_SENSOR)
    (late,) = daemon.submit(requests, sensor=names.PREARM_SENSOR)
    assert late.success and _steps(late, "STEP_SUCCESS") == ["arm"]
    tags = instance.get_run_by_id(late.run_id).tags  # type: ignore[union-attr]
    assert tags[names.TAG_PREARM].startswith("skipped: ")
    assert len(early.store.list_actions(deploy_id=B)) == 1  # served once
    assert plan_run.success


def test_a_boundary_its_pre_armed_run_missed_is_served_by_todays_path(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = _daemon(early, instance)
    assert daemon.evaluate_sensor(names.PREARM_SENSOR)  # requested, never run (killed)
    early.clock.advance(AHEAD + 2)
    (plan_run,) = daemon.tick_sensor(names.BOUNDARY_SENSOR)
    assert plan_run.success
    assert plan_run.dagster_run.job_name == names.TRANSITION_JOB
    (stop_b,) = early.store.list_actions(deploy_id=B)
    assert stop_b.state == "accepted"


def test_pre_arming_is_off_with_a_lead_of_zero(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = _daemon(early, instance, lead=0.0)
    sensor = daemon.defs.resolve_sensor_def(names.PREARM_SENSOR)
    ctx = dg.build_sensor_context(instance=instance, resources=daemon._resources())
    data = sensor.evaluate_tick(ctx)
    assert not data.run_requests
    assert "pre-arming is off" in (data.skip_message or "")


def test_the_code_location_reads_the_lead_and_refuses_a_bad_one() -> None:
    from gps_dagster.dagster_defs.prearm import DEFAULT_LEAD_S, lead_from_env

    assert lead_from_env({}) == DEFAULT_LEAD_S
    assert lead_from_env({"GPS_PREARM_LEAD_S": "90"}) == 90.0
    assert lead_from_env({"GPS_PREARM_LEAD_S": "0"}) == 0.0
    with pytest.raises(ValueError, match=r"GPS_PREARM_LEAD_S='-5'.*fix: "):
        lead_from_env({"GPS_PREARM_LEAD_S": "-5"})
