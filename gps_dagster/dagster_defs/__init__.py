"""The Dagster layer, the only importer of ``dagster``: ``build_definitions`` compiles the
schedules in the store into jobs, boundary schedules, sensors, assets and checks when the code
location loads; a schedule applied later is served by the reconcile sensor at once and gets its
boundary schedules and assets at the next reload.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.assets import (
    build_automation,
    gpu_reservations,
    overcommit_check,
    placement_check,
    schedule_timeline,
)
from gps_dagster.dagster_defs.batches import build_batch_job
from gps_dagster.dagster_defs.deploys import (
    LEAN_ABOVE,
    DeployKeys,
    asset_specs,
    build_deploy_checks,
)
from gps_dagster.dagster_defs.jobs import build_acquire_job, build_transition_job
from gps_dagster.dagster_defs.lineage import (
    build_automation_check,
    schedule_keys,
    schedule_specs,
    upstream,
)
from gps_dagster.dagster_defs.plans import ACQUIRE_FIRST, RELEASE_FIRST
from gps_dagster.dagster_defs.prearm import build_prearmed_job
from gps_dagster.dagster_defs.resources import GpsResource, StaticRuntime, as_resource
from gps_dagster.dagster_defs.schedules import (
    MAX_BOUNDARY_SCHEDULES,
    all_boundary_schedules,
)
from gps_dagster.dagster_defs.sensor_set import build_sensors
from gps_dagster.domain.spec import Schedule

__all__ = ["GpsResource", "Intervals", "StaticRuntime", "build_definitions", "names"]


@dataclass(frozen=True)
class Intervals:
    """Seconds between sensor ticks (Dagster's daemon ticks a sensor at most every ~5 s)."""

    reconcile_s: int = 30
    boundary_s: int = 1
    capacity_s: int = 1
    apply_now_s: int = 1
    prearm_s: int = 1


def build_definitions(
    gps: GpsResource | StaticRuntime | None = None,
    *,
    schedules: Sequence[Schedule] | None = None,
    reconcile_interval_s: int = 30,
    intervals: Intervals | None = None,
    running: bool = True,
    max_boundary_schedules: int = MAX_BOUNDARY_SCHEDULES,
) -> dg.Definitions:
    """Definitions for the schedules in the store (or ``schedules``), served by ``gps``
    (default ``GpsResource()``: the environment's settings; ``StaticRuntime(runtime)`` serves a
    prepared runtime). ``running`` starts sensors and schedules on load."""
    ticks = intervals or Intervals(reconcile_s=reconcile_interval_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return _build(gps, schedules, ticks, running, max_boundary_schedules)


def _build(
    gps: GpsResource | StaticRuntime | None,
    schedules: Sequence[Schedule] | None,
    ticks: Intervals,
    running: bool,
    max_boundary_schedules: int,
) -> dg.Definitions:
    gps = gps if gps is not None else GpsResource()
    if schedules is None:
        schedules = [r.spec for r in gps.get_runtime().intents.schedules()]
    sensor_status = dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED
    schedule_status = (
        dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
    )
    transitions = [build_transition_job(RELEASE_FIRST), build_transition_job(ACQUIRE_FIRST)]
    batch = build_batch_job()
    prearmed = build_prearmed_job()
    jobs = [*transitions, build_acquire_job(), batch, prearmed]
    keys = DeployKeys.of((s.name, t.model_deploy_id) for s in schedules for t in s.targets)
    small = len(keys.schedule_of) <= LEAN_ABOVE
    sched_keys = schedule_keys(schedules) if small else {}
    members = (
        gps.get_runtime().intents.reservation_members(list(keys.schedule_of)) if small else set()
    )
    deps = {d: upstream(s, d, sched_keys, members) for d, s in keys.schedule_of.items()}
    deploy_assets = asset_specs(schedules, keys, deps)
    deploy_checks = build_deploy_checks(deploy_assets)
    sched_assets = schedule_specs(schedules, sched_keys) if small else []
    automation_check = build_automation_check(sched_assets)
    asset_jobs, housekeeping = build_automation(schedule_status, deploy_checks if small else ())
    resource: Any = as_resource(gps) if isinstance(gps, StaticRuntime) else gps
    ready = [s for s in schedules if any(s.is_ready_by(t) for t in s.target_ids)]
    boundary = all_boundary_schedules(
        schedules,
        {j.name: j for j in [*transitions, batch]},
        schedule_status,
        max_boundary_schedules=max_boundary_schedules,
        leads=gps.get_runtime().intents.ready_by_leads(ready) if ready else None,
    )
    return dg.Definitions(
        assets=[gpu_reservations, schedule_timeline, *sched_assets, *deploy_assets],
        asset_checks=[
            placement_check,
            overcommit_check,
            *deploy_checks,
            *([automation_check] if automation_check else []),
        ],
        jobs=[*jobs, *asset_jobs],
        schedules=[*boundary, *housekeeping],
        sensors=build_sensors(jobs, prearmed, ticks, sensor_status, sched_keys),
        resources={"gps": resource},
        executor=dg.in_process_executor,  # asset jobs too: no process spawned per step
    )
