"""One "Launched by" for a boundary's plan on the fallback path (R-DAG-2).

Without a pre-armed run, three passes may open the plan of a boundary first: the boundary
schedule's tick, the boundary sensor (``gps_boundaries``) and a reconcile sweep. Whichever
opens it, the plan run is launched by ``gps_boundaries``, so the Runs list shows one launcher
for one kind of boundary, whatever the race between the daemon's threads. A plan still not
launched ``BOUNDARY_HOLD_S`` after its boundary (the boundary sensor stopped) is launched by
the reconcile sensor."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster_support import MONDAY_0800, Daemon, Runtime

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import BOUNDARY_HOLD_S

START = names.boundary_schedule_name("gpu-pool-h100-shared", "business-hours", "start")
TICK = MONDAY_0800


def _launcher(run: dg.DagsterRun) -> str:
    """What Dagster's Runs list shows as "Launched by" (``RunCreatedByCell``)."""
    return run.tags.get("dagster/schedule_name") or run.tags.get("dagster/sensor_name") or "-"


def _plan_runs(daemon: Daemon) -> list[dg.DagsterRun]:
    (tid,) = {t.id for t in daemon.rt.store.list_transitions()}
    return daemon.runs(**{"dagster/run_key": names.plan_run_key(tid)})


def _first(daemon: Daemon, who: str) -> None:
    if who == "schedule":
        daemon.submit(daemon.evaluate_schedule(START, TICK), schedule=START, at=TICK)
    else:
        daemon.tick_sensor(who)


@pytest.mark.parametrize(
    "order",
    [
        ("schedule", names.BOUNDARY_SENSOR, names.RECONCILE_SENSOR),
        (names.RECONCILE_SENSOR, "schedule", names.BOUNDARY_SENSOR),
        (names.BOUNDARY_SENSOR, names.RECONCILE_SENSOR, "schedule"),
    ],
    ids=["schedule-first", "reconcile-first", "boundaries-first"],
)
def test_whichever_pass_opens_the_boundary_plan_gps_boundaries_launches_it(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance, order: tuple[str, ...]
) -> None:
    daemon = Daemon(defs, rt, instance)
    for who in order:
        _first(daemon, who)
        rt.clock.advance(1)
    for _ in range(4):  # and the sensors keep ticking: still one run
        rt.clock.advance(30)
        daemon.tick_sensor(names.RECONCILE_SENSOR)
        daemon.tick_sensor(names.BOUNDARY_SENSOR)
    (run,) = _plan_runs(daemon)
    assert _launcher(run) == names.BOUNDARY_SENSOR


def test_the_schedule_tick_says_who_launches_the_plan_it_opened(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    resources = Daemon(defs, rt, instance)._resources()
    ctx = dg.build_schedule_context(
        instance=instance, scheduled_execution_time=TICK, resources=resources
    )
    data = defs.resolve_schedule_def(START).evaluate_tick(ctx)
    assert not data.run_requests
    assert f"launched by {names.BOUNDARY_SENSOR}" in (data.skip_message or "")


def test_with_gps_boundaries_stopped_the_reconcile_sensor_launches_it_after_the_hold(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    daemon = Daemon(defs, rt, instance)
    _first(daemon, "schedule")  # opened at 08:00:05; gps_boundaries never ticks
    assert daemon.tick_sensor(names.RECONCILE_SENSOR) == []
    rt.clock.advance(BOUNDARY_HOLD_S - 6)  # 08:00:59: still held
    assert daemon.tick_sensor(names.RECONCILE_SENSOR) == []
    rt.clock.advance(1)
    daemon.tick_sensor(names.RECONCILE_SENSOR)
    (run,) = _plan_runs(daemon)
    assert _launcher(run) == names.RECONCILE_SENSOR
    assert rt.store.list_actions(deploy_id="md-qwen32b")[0].state == "accepted"

