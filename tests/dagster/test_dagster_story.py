"""One swap, one story: the capacity-wait run joins the plan run's group; apply-now says what
it did; a terminal phase turns the deploy's check red (sensors ticked like the daemon)."""

from __future__ import annotations

import dagster as dg
from dagster_support import Daemon, Runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names

A, B = "md-llama70b", "md-qwen32b"


def test_the_acquire_run_is_in_the_plan_runs_group_and_shows_only_the_acquire(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = Daemon(defs, rt, instance)
    (plan_result,) = daemon.tick_sensor(names.RECONCILE_SENSOR)
    plan_run = plan_result.dagster_run
    assert daemon.evaluate_sensor(names.CAPACITY_WAIT_SENSOR) == []  # B's GPUs not yet published
    rt.clock.advance(100)  # the seed pool publishes them 30 + 60 s after the stop
    (request,) = daemon.evaluate_sensor(names.CAPACITY_WAIT_SENSOR)
    assert request.job_name == names.ACQUIRE_JOB
    assert request.tags[names.ROOT_RUN_TAG] == request.tags[names.PARENT_RUN_TAG] == plan_run.run_id
    (acquire,) = daemon.submit([request], sensor=names.CAPACITY_WAIT_SENSOR)
    assert acquire.success
    steps = {
        e.step_key.split("[")[0]
        for e in acquire.all_events  # type: ignore[union-attr]
        if e.event_type_value == "STEP_SUCCESS"
    }
    assert steps == {"plan", "admit", "acquire", "done"}  # no empty release fan-out
    root, group = instance.get_run_group(plan_run.run_id)  # type: ignore[misc]
    assert root == plan_run.run_id
    assert {r.run_id for r in group} == {plan_run.run_id, acquire.dagster_run.run_id}
    assert rt.store.get_status("gpu-pool-h100-shared", A).phase == "awaiting_ready"  # type: ignore[union-attr]


def test_a_queued_apply_now_names_its_outcome(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = Daemon(defs, rt, instance)
    daemon.tick_sensor(names.RECONCILE_SENSOR)  # the 08:00 plan runs
    request = rt.store.request_apply_now("gpu-pool-h100-shared", now=rt.clock.now())
    sensor = defs.resolve_sensor_def(names.APPLY_NOW_SENSOR)
    from gps_dagster.dagster_defs.resources import as_resource

    tick = sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, resources={"gps": as_resource(rt)})
    )
    assert not tick.run_requests
    assert f"apply-now #{request} gpu-pool-h100-shared: 200 ok: no new run needed" in (
        tick.skip_message or ""
    )
    answer = rt.store.get_apply_now(request)
    # B is releasing and A waits for B's GPUs: not "every target already at its intent"
    # (issue 20 §3), but the plan on its way, target by target
    assert answer.state == "done" and "already at its intent" not in (answer.result or "")
    assert "still on its way: md-llama70b capacity_wait, md-qwen32b releasing" in (
        answer.result or ""
    )


def test_alias_blocked_fails_the_deploys_check_with_error_severity(
    sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    from dagster_support import make_runtime

    from gps_dagster.dagster_defs.resources import as_resource

    rt = make_runtime(sqlite_url)
    seed_schedule(rt)
    rt.clock.advance(5)
    daemon = Daemon(build_definitions(StaticRuntime(rt)), rt, instance)
    daemon.tick_sensor(names.RECONCILE_SENSOR)  # 08:00: B released, A waits for its GPUs
    rt.clock.advance(100)
    daemon.tick_sensor(names.CAPACITY_WAIT_SENSOR)  # A started
    rt.clock.advance(300)
    daemon.tick_sensor(names.RECONCILE_SENSOR)
    assert rt.store.get_status("gpu-pool-h100-shared", A).phase == "converged"  # type: ignore[union-attr]
    spec = rt.store.get_schedule("gpu-pool-h100-shared").spec
    targets = tuple(t.model_copy(update={"default_allow_downtime": False}) for t in spec.targets)
    rt.store.apply_schedule(
        spec.model_copy(update={"targets": targets, "windows": ()}), now=rt.clock.now()
    )  # v2: A stopped, without consent
    defs = build_definitions(StaticRuntime(rt))
    sensor = defs.resolve_sensor_def(names.RECONCILE_SENSOR)
    tick = sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, resources={"gps": as_resource(rt)})
    )
    assert not tick.run_requests  # preflight refused the plan: A is not stopped without consent
    evaluations = {
        e.asset_key.to_user_string(): e
        for e in tick.asset_events
        if isinstance(e, dg.AssetCheckEvaluation)
    }
    red = evaluations["deploy/md_llama70b"]
    assert not red.passed and red.severity == dg.AssetCheckSeverity.ERROR
    assert "alias_blocked" in (red.description or "") and "allow_downtime" in (
        red.description or ""
    )
    checks = defs.resolve_job_def(names.DEPLOY_CHECKS_JOB)  # executable from the UI as well
    run = checks.execute_in_process(
        instance=instance, resources={"gps": as_resource(rt)}, raise_on_error=False
    )
    executed = {
        e.asset_check_evaluation_data.asset_key.to_user_string():  # type: ignore[union-attr]
        e.asset_check_evaluation_data.passed  # type: ignore[union-attr]
        for e in run.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert executed["deploy/md_llama70b"] is False  # the executable check agrees
