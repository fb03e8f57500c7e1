"""What the Catalog and the asset graph show without opening each asset (issue 20 §3).

* the asset graph has real edges: schedule → its deploys, ``gpu_reservations`` → its members;
* turning ``gps_capacity_wait`` off (the UI's toggle stores the sensor STOPPED) is said: the
  reconcile sensor's status line warns, and each schedule asset's ``automation`` check goes
  yellow (WARN) until the sensor is on again.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest
from dagster_support import EXAMPLES, Runtime, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.resources import as_resource

SCHEDULE_KEY = dg.AssetKey(["schedule", "gpu_pool_h100_shared"])


def _parents(defs: dg.Definitions) -> dict[str, list[str]]:
    graph = defs.resolve_asset_graph()
    return {
        k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys)
        for k in graph.get_all_asset_keys()
    }


def test_the_asset_graph_links_each_schedule_to_its_deploys(defs: dg.Definitions) -> None:
    parents = _parents(defs)
    assert parents["deploy/md_llama70b"] == ["schedule/gpu_pool_h100_shared"]
    assert parents["deploy/md_qwen32b"] == ["schedule/gpu_pool_h100_shared"]
    assert parents["schedule/gpu_pool_h100_shared"] == []
    spec = defs.resolve_assets_def(SCHEDULE_KEY).specs_by_key[SCHEDULE_KEY]
    assert spec.group_name == "gpu_pool_h100_shared"  # beside its deploys in the catalog


def test_the_asset_graph_links_a_reservation_to_its_members(sqlite_url: str) -> None:
    rt = make_runtime(sqlite_url, pool_file=EXAMPLES / "gpu42-pool.yaml")
    seed_schedule(rt, EXAMPLES / "gpu42-schedule.json")
    parents = _parents(build_definitions(StaticRuntime(rt)))
    for member in ("md_vision_chat", "md_vision_embed", "md_vision_batch"):
        assert parents[f"deploy/{member}"] == [
            names.RESERVATIONS_ASSET,
            "schedule/vision_gpu42_shared",
        ]  # vision/gpu42-shared


def _set_sensor(instance: dg.DagsterInstance, name: str, status: str) -> None:
    """What the UI's toggle stores (``instance.stop_sensor`` / ``start_sensor``)."""
    from dagster._core.remote_origin import (
        RegisteredCodeLocationOrigin,
        RemoteInstigatorOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.scheduler.instigation import (
        InstigatorState,
        InstigatorStatus,
        InstigatorType,
    )

    origin = RemoteInstigatorOrigin(
        RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("gps"), "__repository__"), name
    )
    state = InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus[status])
    if instance.get_instigator_state(origin.get_id(), state.selector_id):
        instance.update_instigator_state(state)
    else:
        instance.add_instigator_state(state)


def _reconcile(defs: dg.Definitions, rt: Runtime, instance: Any, cursor: str | None) -> Any:
    sensor = defs.resolve_sensor_def(names.RECONCILE_SENSOR)
    ctx = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"gps": as_resource(rt)}, definitions=defs
    )
    return sensor.evaluate_tick(ctx)


def _automation(data: Any) -> list[dg.AssetCheckEvaluation]:
    return [
        e
        for e in data.asset_events
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == names.CHECK_AUTOMATION
    ]


def test_turning_capacity_wait_off_turns_the_schedule_yellow_until_it_is_on_again(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    from dagster_support import Daemon

    daemon = Daemon(defs, rt, instance)
    daemon.tick_sensor(names.RECONCILE_SENSOR)  # the seed's 08:00 plan, run in process
    rt.clock.advance(60)
    first = _reconcile(defs, rt, instance, daemon.cursors[names.RECONCILE_SENSOR])
    assert _automation(first) == []  # all on: reported green by the daemon's tick already
    assert first.skip_message.startswith("pass done")  # nothing left to launch

    _set_sensor(instance, names.CAPACITY_WAIT_SENSOR, "STOPPED")
    data = _reconcile(defs, rt, instance, first.cursor)
    [warn] = _automation(data)
    assert warn.asset_key == SCHEDULE_KEY
    assert not warn.passed and warn.severity == dg.AssetCheckSeverity.WARN
    assert warn.description.startswith("gps_capacity_wait is stopped: an acquire that waits")
    assert "dagster sensor start gps_capacity_wait" in warn.description

    again = _reconcile(defs, rt, instance, data.cursor)
    assert _automation(again) == []  # reported once, not every tick
    assert again.skip_message.startswith("WARNING: gps_capacity_wait is stopped")

    _set_sensor(instance, names.CAPACITY_WAIT_SENSOR, "RUNNING")
    back = _reconcile(defs, rt, instance, again.cursor)
    [green] = _automation(back)
    assert green.passed and green.description == "every GPS sensor is on"
    assert "WARNING" not in (back.skip_message or "")


def test_a_sensor_stopped_in_another_code_location_is_not_ours(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    from gps_dagster.dagster_defs.health import sensor_defaults, stopped_sensors

    _set_sensor(instance, names.CAPACITY_WAIT_SENSOR, "STOPPED")  # stored for location "gps"
    repo = defs.get_repository_def()
    assert stopped_sensors(instance, sensor_defaults(repo), location="gps") == [
        names.CAPACITY_WAIT_SENSOR
    ]
    assert stopped_sensors(instance, sensor_defaults(repo), location="other") == []


@pytest.mark.parametrize("running", [False])
def test_sensors_declared_off_in_code_are_reported_too(
    rt: Runtime, instance: dg.DagsterInstance, running: bool
) -> None:
    defs = build_definitions(StaticRuntime(rt), running=running)
    [warn] = _automation(_reconcile(defs, rt, instance, None))
    for name in (names.CAPACITY_WAIT_SENSOR, names.BOUNDARY_SENSOR, names.PREARM_SENSOR):
        assert f"{name} is stopped" in warn.description


def test_the_warning_names_the_deploy_left_waiting_for_capacity(rt: Runtime) -> None:
    from gps_dagster.dagster_defs.health import warning_text

    text = warning_text([names.CAPACITY_WAIT_SENSOR], ["md-llama70b"])
    assert "(waiting for capacity now: md-llama70b)" in text


def _boundaries(defs: dg.Definitions, rt: Runtime, instance: Any, cursor: str | None) -> Any:
    sensor = defs.resolve_sensor_def(names.BOUNDARY_SENSOR)
    ctx = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"gps": as_resource(rt)}, definitions=defs
    )
    return sensor.evaluate_tick(ctx)


def test_a_stopped_gps_reconcile_is_reported_by_gps_boundaries_until_it_is_on_again(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    """The reconcile sensor reports every stopped sensor but its own stop (it does not tick):
    the boundary sensor turns the schedule's ``automation`` check yellow, once, and green
    again when it is back on."""
    quiet = _boundaries(defs, rt, instance, None)
    assert _automation(quiet) == []  # all on: nothing from the boundary sensor
    _set_sensor(instance, names.RECONCILE_SENSOR, "STOPPED")
    data = _boundaries(defs, rt, instance, quiet.cursor)
    [warn] = _automation(data)
    assert warn.asset_key == SCHEDULE_KEY
    assert not warn.passed and warn.severity == dg.AssetCheckSeverity.WARN
    assert warn.description.startswith("gps_reconcile is stopped: no sweep")
    assert "dagster sensor start gps_reconcile" in warn.description
    again = _boundaries(defs, rt, instance, data.cursor)
    assert _automation(again) == []  # once per change, not every tick
    assert (again.skip_message or "").startswith("WARNING: gps_reconcile is stopped")
    _set_sensor(instance, names.RECONCILE_SENSOR, "RUNNING")
    back = _boundaries(defs, rt, instance, again.cursor)
    [green] = _automation(back)
    assert green.passed and green.description == "every GPS sensor is on"
    assert _automation(_boundaries(defs, rt, instance, back.cursor)) == []
