"""The Dagster layer: compile deploy schedules into Dagster definitions (SPEC §9).

This package is the only importer of ``dagster``. It is a thin compile step
over the engine and the store: ``build_definitions`` returns one transition
job, the boundary schedules of every recurring window, the sensors
(reconcile, boundaries, capacity wait, apply-now, reservation partitions) and
the assets (``gpu_reservations`` with its checks, ``target_status``,
``schedule_timeline``). Definitions are built when the code location loads,
from the schedules in the store; a schedule applied later is served at once by
the reconcile sensor and gets its boundary schedules at the next reload.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.assets import (
    gpu_reservations,
    overcommit_check,
    placement_check,
    schedule_timeline,
    target_status,
)
from gps_dagster.dagster_defs.automation import build_automation
from gps_dagster.dagster_defs.jobs import build_transition_job
from gps_dagster.dagster_defs.plans import ACQUIRE_FIRST, RELEASE_FIRST
from gps_dagster.dagster_defs.resources import GpsResource, StaticRuntime, as_resource
from gps_dagster.dagster_defs.schedules import all_boundary_schedules
from gps_dagster.dagster_defs.sensors import (
    build_apply_now_sensor,
    build_boundary_sensor,
    build_capacity_sensor,
    build_reconcile_sensor,
    build_reservation_sensor,
)
from gps_dagster.domain.spec import Schedule

__all__ = ["GpsResource", "StaticRuntime", "build_definitions", "names"]


def build_definitions(
    gps: GpsResource | StaticRuntime | None = None,
    *,
    schedules: Sequence[Schedule] | None = None,
    reconcile_interval_s: int = 30,
    boundary_interval_s: int = 1,
    capacity_interval_s: int = 10,
    apply_now_interval_s: int = 5,
    running: bool = True,
) -> dg.Definitions:
    """Definitions for the schedules in the store (or ``schedules``), served by ``gps``.

    ``gps`` defaults to ``GpsResource()`` (the settings of the environment:
    ``$GPS_BACKEND``, ``$GPS_DB_URL``, ``$GPS_POOL_FILE``, ``$GPS_CLOCK``... see
    ``gps_dagster.runtime``); pass ``StaticRuntime(runtime)`` to serve a prepared runtime
    (tests, virtual clock). ``running`` starts sensors and schedules on load.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _build(gps, schedules, reconcile_interval_s, boundary_interval_s, capacity_interval_s, apply_now_interval_s, running)


def _build(
    gps: GpsResource | StaticRuntime | None,
    schedules: Sequence[Schedule] | None,
    reconcile_interval_s: int,
    boundary_interval_s: int,
    capacity_interval_s: int,
    apply_now_interval_s: int,
    running: bool,
) -> dg.Definitions:
    gps = gps if gps is not None else GpsResource()
    if schedules is None:
        schedules = [r.spec for r in gps.get_runtime().store.list_schedules()]
    sensor_status = dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED
    schedule_status = dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
    jobs = [build_transition_job(RELEASE_FIRST), build_transition_job(ACQUIRE_FIRST)]
    asset_jobs, housekeeping = build_automation(schedule_status)
    resource: Any = as_resource(gps.get_runtime()) if isinstance(gps, StaticRuntime) else gps
    return dg.Definitions(
        assets=[gpu_reservations, schedule_timeline, target_status],
        asset_checks=[placement_check, overcommit_check],
        jobs=[*jobs, *asset_jobs],
        schedules=[*all_boundary_schedules(schedules, {j.name: j for j in jobs}, schedule_status), *housekeeping],
        sensors=[
            build_reconcile_sensor(jobs, interval_s=reconcile_interval_s, default_status=sensor_status),
            build_boundary_sensor(jobs, interval_s=boundary_interval_s, default_status=sensor_status),
            build_capacity_sensor(jobs, interval_s=capacity_interval_s, default_status=sensor_status),
            build_apply_now_sensor(jobs, interval_s=apply_now_interval_s, default_status=sensor_status),
            build_reservation_sensor(interval_s=60, default_status=sensor_status),
        ],
        resources={"gps": resource},
    )
