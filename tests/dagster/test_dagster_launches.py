"""How many runs the daemon launches for one plan: sensors and schedules ticked like the
daemon ticks them (``Daemon`` in dagster_support.py) on a virtual clock.

Issue 9 §2.5: with ``acquire_first`` a resume run was launched on every reconcile tick
while the acquire loaded. §2.11: the same ``<transition>:plan`` key requested by a
boundary schedule and by the reconcile sensor was launched twice (the daemon dedups
per origin only).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dagster as dg
import yaml
from dagster_support import EXAMPLES, Daemon, Runtime, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.domain.spec import TransitionOrder

A, B = "md-llama70b", "md-qwen32b"
SEED = "gpu-pool-h100-shared"
START = names.boundary_schedule_name(SEED, "business-hours", "start")


def _roomy_pool(tmp_path: Path) -> Path:
    """The seed pool plus a third 8-GPU node: A fits beside B, as acquire_first needs."""
    doc = yaml.safe_load((EXAMPLES / "seed-pool-10.yaml").read_text())
    doc["nodes"].append({"name": "hgx-03", "gpus": 8, "flavor": "H100-80GB", "region": "hcm-1"})
    path = tmp_path / "roomy-pool.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _phases(rt: Runtime) -> dict[str, str]:
    return {r.deploy_id: r.phase for r in rt.store.list_status()}


def test_acquire_first_launches_no_resume_run_while_the_acquire_loads(
    sqlite_url: str, tmp_path: Path
) -> None:
    rt = make_runtime(sqlite_url, pool_file=_roomy_pool(tmp_path))
    seed_schedule(rt, transition_order=TransitionOrder.ACQUIRE_FIRST)
    rt.clock.advance(5)
    defs = build_definitions(StaticRuntime(rt))
    with dg.instance_for_test() as instance:
        daemon = Daemon(defs, rt, instance)
        for _ in range(40):  # 20 minutes of reconcile and capacity ticks; A loads for 120 s
            daemon.tick_sensor(names.RECONCILE_SENSOR)
            daemon.tick_sensor(names.CAPACITY_WAIT_SENSOR)
            rt.clock.advance(30)
        (transition,) = {r.tags[names.TAG_TRANSITION] for r in daemon.requested}
        keys = sorted({r.run_key or "" for r in daemon.requested})
        runs = daemon.runs(**{names.TAG_TRANSITION: transition})
    assert _phases(rt) == {A: "converged", B: "converged"}
    # one plan run (acquires A, B waits), one resume once A converged (releases B)
    assert keys == [names.plan_run_key(transition), names.resume_run_key(transition, 1)], keys
    assert len(runs) == 2, [r.tags.get("dagster/run_key") for r in runs]


def test_one_plan_seen_by_the_boundary_schedule_and_the_reconcile_sensor_gets_exactly_one_run(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = Daemon(defs, rt, instance)
    at = rt.clock.now() - timedelta(seconds=5)  # the 08:00 tick, evaluated at 08:00:05
    by_schedule = daemon.evaluate_schedule(START, at)
    assert [r.tags[names.TAG_TRIGGER] for r in by_schedule] == ["boundary_start"]
    transition = by_schedule[0].tags[names.TAG_TRANSITION]
    # the reconcile sensor ticks before the daemon created the schedule's run
    by_sensor = daemon.evaluate_sensor(names.RECONCILE_SENSOR)
    daemon.submit(by_schedule, schedule=START, at=at)
    daemon.submit(by_sensor, sensor=names.RECONCILE_SENSOR)
    for _ in range(10):
        rt.clock.advance(30)
        daemon.tick_sensor(names.RECONCILE_SENSOR)
        daemon.tick_sensor(names.CAPACITY_WAIT_SENSOR)
    plan_runs = daemon.runs(**{"dagster/run_key": names.plan_run_key(transition)})
    assert len(plan_runs) == 1, [
        r.tags.get("dagster/schedule_name") or r.tags.get("dagster/sensor_name") for r in plan_runs
    ]
    assert plan_runs[0].tags["dagster/schedule_name"] == START  # the first origin to claim it


def test_a_plan_launched_by_a_schedule_while_the_gate_is_off_is_not_launched_again_by_the_reconcile_sensor(  # noqa: E501
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = Daemon(defs, rt, instance)
    at = rt.clock.now() - timedelta(seconds=5)
    by_schedule = daemon.evaluate_schedule(START, at)
    rt.store.set_gate("off", now=rt.clock.now())  # turned off before the run started
    daemon.submit(by_schedule, schedule=START, at=at)  # runs; its steps stay pending
    transition = by_schedule[0].tags[names.TAG_TRANSITION]
    for _ in range(3):
        rt.clock.advance(30)
        daemon.tick_sensor(names.RECONCILE_SENSOR)
    assert len(daemon.runs(**{names.TAG_TRANSITION: transition})) == 1
    rt.store.set_gate("enforce", now=rt.clock.now())
    rt.clock.advance(30)
    daemon.tick_sensor(names.RECONCILE_SENSOR)  # the plan resumes once, under its resume key
    keys = [
        r.tags.get("dagster/run_key") for r in daemon.runs(**{names.TAG_TRANSITION: transition})
    ]
    assert sorted(keys) == [names.plan_run_key(transition), names.resume_run_key(transition, 1)]


def test_a_plan_claim_whose_run_never_appeared_is_taken_over_by_the_reconcile_sensor(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    from gps_dagster.engine.launches import CLAIM_TAKEOVER_S

    daemon = Daemon(defs, rt, instance)
    at = rt.clock.now() - timedelta(seconds=5)
    lost = daemon.evaluate_schedule(START, at)  # claimed, but the daemon never submits it
    transition = lost[0].tags[names.TAG_TRANSITION]
    assert daemon.evaluate_sensor(names.RECONCILE_SENSOR) == []  # claimed by the schedule
    rt.clock.advance(CLAIM_TAKEOVER_S - 1)
    assert daemon.evaluate_sensor(names.RECONCILE_SENSOR) == []
    rt.clock.advance(1)
    daemon.tick_sensor(names.RECONCILE_SENSOR)
    daemon.tick_sensor(names.RECONCILE_SENSOR)
    (run,) = daemon.runs(**{names.TAG_TRANSITION: transition})
    assert run.tags["dagster/sensor_name"] == names.RECONCILE_SENSOR
    assert run.tags["dagster/run_key"] == names.plan_run_key(transition)
