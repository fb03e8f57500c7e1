"""The code location's six sensors, built by one builder over their ticks
(``(context, runtime) -> SensorResult | SkipReason``, in ``sensors.py`` and ``prearm.py``)."""

# Decisions embodied here (docs/decisions.md):
# * “The Dagster layer asks the engine by intent”

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.prearm import prearm_sensor_tick
from gps_dagster.dagster_defs.sensors import (
    apply_now_sensor_tick,
    boundary_sensor_tick,
    capacity_sensor_tick,
    reconcile_sensor_tick,
    reservation_sensor_tick,
)

if TYPE_CHECKING:
    from gps_dagster.dagster_defs import Intervals
    from gps_dagster.runtime import Runtime

Tick = Callable[[dg.SensorEvaluationContext, "Runtime"], dg.SensorResult | dg.SkipReason]


def gps_sensor(
    name: str,
    description: str,
    tick: Tick,
    *,
    jobs: Sequence[dg.JobDefinition] = (),
    interval_s: int,
    default_status: dg.DefaultSensorStatus,
) -> dg.SensorDefinition:
    """One sensor of the code location: ``tick`` on the ``gps`` resource's runtime."""

    @dg.sensor(
        name=name,
        jobs=list(jobs) or None,
        minimum_interval_seconds=interval_s,
        required_resource_keys={"gps"},
        default_status=default_status,
        description=description,
    )
    def evaluate(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        return tick(context, context.resources.gps.get_runtime())

    return evaluate


def build_sensors(
    jobs: Sequence[dg.JobDefinition],
    prearmed: dg.JobDefinition,
    every: Intervals,
    default_status: dg.DefaultSensorStatus,
    schedule_keys: Mapping[str, dg.AssetKey] | None = None,
) -> list[dg.SensorDefinition]:
    keys = dict(schedule_keys or {})
    sensor = partial(gps_sensor, default_status=default_status)
    return [
        sensor(
            names.RECONCILE_SENSOR,
            "Pages over the schedules from a durable cursor, opens transitions and launches them.",
            partial(reconcile_sensor_tick, schedule_keys=keys),
            jobs=jobs,
            interval_s=every.reconcile_s,
        ),
        sensor(
            names.BOUNDARY_SENSOR,
            "Every schedule the due index says needs a pass now (a boundary, including one-shot "
            "windows and DST-shifted ends no cron can express; a follow-up of steps in flight): "
            "one claimed, batched pass.",
            partial(boundary_sensor_tick, schedule_keys=keys),
            jobs=jobs,
            interval_s=every.boundary_s,
        ),
        sensor(
            names.CAPACITY_WAIT_SENSOR,
            "Re-previews targets in capacity_wait; launches the acquire when it fits, times out "
            "to capacity_unavailable.",
            capacity_sensor_tick,
            jobs=jobs,
            interval_s=every.capacity_s,
        ),
        sensor(
            names.APPLY_NOW_SENSOR,
            "Serves `gps-dagster apply-now NAME --queue` requests: a pass for that schedule "
            "(409 when busy).",
            apply_now_sensor_tick,
            jobs=jobs,
            interval_s=every.apply_now_s,
        ),
        sensor(
            names.RESERVATION_SENSOR,
            "Keeps one gpu_reservations partition per reservation in the ledger.",
            reservation_sensor_tick,
            interval_s=30,
        ),
        sensor(
            names.PREARM_SENSOR,
            "Launches a gps_prearmed run ahead of every near boundary (lead = the resource's "
            "prearm_lead_s): it waits for the boundary and serves it from a started run.",
            prearm_sensor_tick,
            jobs=[prearmed],
            interval_s=every.prearm_s,
        ),
    ]
