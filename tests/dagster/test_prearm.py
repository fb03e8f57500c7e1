"""Pre-armed runs (issue 20 §1): launched ahead of the boundary, the plan opened at it.

The run waits for the boundary on the runtime's (virtual) clock, then opens and fences the plan
exactly at the boundary instant: its release is submitted at 08:00:00.000 whatever the run's
start-up cost, and the acquire follows in the same run. An edit made while it waited is seen;
a plan another origin launched first ends the run skipped with the reason; a pre-armed run
that never ran leaves the boundary to today's path."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

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
    seed_schedule(early, windows=())  # edited while the run waits: no window any more
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
    from gps_dagster.engine.prearm import lead_from_env

    assert lead_from_env({}) is None  # unset: measured on the instance
    assert lead_from_env({"GPS_PREARM_LEAD_S": "90"}) == 90.0
    assert lead_from_env({"GPS_PREARM_LEAD_S": "0"}) == 0.0
    with pytest.raises(ValueError, match=r"GPS_PREARM_LEAD_S='-5'.*fix: "):
        lead_from_env({"GPS_PREARM_LEAD_S": "-5"})


class _Record:
    def __init__(self, created: float, started: float | None, ended: float | None) -> None:
        from datetime import UTC, datetime

        self.create_timestamp = datetime.fromtimestamp(created, UTC)
        self.start_time = started
        self.end_time = ended


class _Instance:
    """The facts ``measured_lead`` reads of a Dagster instance: its recent run records (a wait
    of None: ended without starting; "waiting": created at 1000 s, not started yet)."""

    def __init__(self, waits: list[float | str | None]) -> None:
        self.records = [
            _Record(1000.0, None, None)
            if w == "waiting"
            else _Record(1000.0, None, 1001.0)
            if w is None
            else _Record(1000.0, 1000.0 + float(w), 1000.0 + float(w) + 1)
            for w in waits
        ]

    def get_run_records(self, limit: int) -> list[_Record]:
        return self.records[:limit]


def test_unset_the_lead_follows_the_instances_measured_run_starts() -> None:
    """A loaded machine (runs starting 15–40 s after creation) or a Kubernetes Job launcher
    gets a lead above its start p95; a quiet one keeps the 30 s floor."""
    from gps_dagster.dagster_defs.prearm import measured_lead
    from gps_dagster.engine.prearm import DEFAULT_LEAD_S, MAX_LEAD_S

    assert measured_lead(_Instance([])) == DEFAULT_LEAD_S  # nothing measured yet
    assert measured_lead(_Instance([3.3] * 20)) == DEFAULT_LEAD_S  # quiet: the floor
    loaded = [15.0 + i for i in range(19)] + [60.0]
    assert measured_lead(_Instance(loaded)) == 33.0 * 2  # p95 of 20 = the 19th, twice
    assert measured_lead(_Instance([None, 80.0])) == 160.0  # runs that never started: left out
    assert measured_lead(_Instance([12.0] * 20)) == DEFAULT_LEAD_S  # 12 + 10 s: the floor
    # Kubernetes Jobs measured at 20-24 s: twice the p95, not + 10 s — under a rising load the
    # starts outrun the p95 of the last runs (a Job given 34 s armed 38.5 s after its creation)
    jobs = [20.0] * 10 + [24.0] * 10
    assert measured_lead(_Instance(jobs)) == 48.0
    assert measured_lead(_Instance([5000.0])) == MAX_LEAD_S


def test_a_run_still_waiting_to_start_counts_as_waited_so_far() -> None:
    """A fresh instance whose first runs are all still starting (Kubernetes Jobs under load):
    their wait so far is the least their start will take, so the lead is at least that and its
    margin, not the 30 s floor that let the first pre-armed Job start after its boundary."""
    from datetime import UTC, datetime

    from gps_dagster.dagster_defs.prearm import measured_lead
    from gps_dagster.engine.prearm import DEFAULT_LEAD_S

    now = datetime.fromtimestamp(1070.0, UTC)  # 70 s after the runs were created
    assert measured_lead(_Instance(["waiting"]), now) == 140.0  # 70 s, twice
    assert measured_lead(_Instance([3.3] * 18 + ["waiting"] * 2), now) == 140.0  # p95 of 20: 19th
    assert measured_lead(_Instance([None, "waiting"]), now) == 140.0  # ended unstarted: out
    assert measured_lead(_Instance(["waiting"])) == DEFAULT_LEAD_S  # no instant: not counted
    early = datetime.fromtimestamp(990.0, UTC)  # a clock behind the runs' creation
    assert measured_lead(_Instance(["waiting"]), early) == DEFAULT_LEAD_S


def test_a_resource_without_a_lead_measures_it(instance: dg.DagsterInstance) -> None:
    from gps_dagster.dagster_defs.prearm import prearm_lead_s
    from gps_dagster.engine.prearm import DEFAULT_LEAD_S

    class Gps:
        prearm_lead_s = None

    assert prearm_lead_s(Gps(), instance) == DEFAULT_LEAD_S  # an empty instance: the floor
    assert prearm_lead_s(StaticRuntime(None, prearm_lead_s=12.0), instance) == 12.0


def test_the_arm_op_itself_submits_the_release_at_the_boundary_before_any_other_op(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    """At the boundary the run only passes, claims and submits (R-NEXT-3): the release is
    sent by the ``arm`` op, not after Dagster has recorded its outputs and started the
    release op (each event write costs up to seconds under load). Run alone, ``arm`` leaves
    the release accepted; the release op that follows advances the step it finds sent."""
    daemon = _daemon(early, instance)
    (request,) = daemon.evaluate_sensor(names.PREARM_SENSOR)
    job = daemon.defs.resolve_job_def(names.PREARM_JOB)
    result = job.execute_in_process(
        run_config=request.run_config, instance=instance, op_selection=["arm"]
    )
    assert result.success
    (stop_b,) = early.store.list_actions(deploy_id=B)
    assert stop_b.state == "accepted"
    assert stop_b.submitted_at == MONDAY_0800
    (start_a,) = early.store.list_actions(deploy_id=A)
    assert start_a.submitted_at is None  # the acquire waits for its admit op, as before
    text = " ".join(r.user_message for r in instance.all_logs(result.run_id))
    assert "releases submitted at the boundary: md-qwen32b accepted" in text


def test_between_the_boundary_and_the_submit_the_arm_op_reads_the_pool_once(
    early: Runtime, instance: dg.DagsterInstance
) -> None:
    """The pass at the boundary reads the deploys, the alias guard and the preflight; the
    submit that follows trusts what that pass, opening the plan a moment ago, just read
    (``execute_steps(fresh=…)``). Before, the release's re-check read all of it again: a
    second round of core calls (transactions, for the simulator) between the boundary and the
    submit, on a machine where each costs most under load."""
    core = early.engine.core
    calls: list[str] = []
    for name in ("get_deploys", "alias_guard", "check_quota", "check_billing"):
        real = getattr(core, name)

        def counted(*args: object, _name: str = name, _real: Any = real, **kw: object) -> Any:
            calls.append(_name)
            return _real(*args, **kw)

        setattr(core, name, counted)
    daemon = _daemon(early, instance)
    (request,) = daemon.evaluate_sensor(names.PREARM_SENSOR)
    calls.clear()  # what the sensor read ahead of the boundary does not count
    job = daemon.defs.resolve_job_def(names.PREARM_JOB)
    result = job.execute_in_process(
        run_config=request.run_config, instance=instance, op_selection=["arm"]
    )
    assert result.success
    (stop_b,) = early.store.list_actions(deploy_id=B)
    assert (stop_b.state, stop_b.submitted_at) == ("accepted", MONDAY_0800)
    assert calls.count("get_deploys") == 1, calls  # the pass's read; none after it
    assert calls.count("alias_guard") == 1, calls  # the pass's preflight of the stop of B
