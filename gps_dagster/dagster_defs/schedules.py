"""Boundary schedules: Dagster cron ticks at the start and end of every recurring window.

Up to ``max_boundary_schedules`` (200) a code location gets one readable schedule per window
edge, so the Automation page shows each window's next ticks; a larger fleet gets one
``gps_every_minute`` schedule serving the due index. A tick only asks the engine for a pass
and never decides start vs end from its own time (DST moves ticks: Dagster fires ``30 2`` at
03:00 on spring-forward day), so an early, late or extra tick is harmless.
"""

# Decisions embodied here (docs/decisions.md):
# * “A large fleet gets one every-minute schedule”
# * “Dagster finds due work by the index, and its cursor no longer decides what is due”
# * “Late boundary ticks say what they serve”
# * “Ready-by on Dagster: an early cron fixed at load, the due index for the rest”

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import claim_launches, job_for, plan_requests, schedule_origin
from gps_dagster.dagster_defs.resources import pauser
from gps_dagster.domain.edge_crons import window_crons
from gps_dagster.domain.spec import Schedule, TransitionOrder
from gps_dagster.engine import ticks
from gps_dagster.engine.errors import Busy


def _tick(schedule_name: str, edge: str, origin: str, window: str = "") -> Any:
    def evaluate(context: dg.ScheduleEvaluationContext) -> Iterator[dg.RunRequest | dg.SkipReason]:
        gps = context.resources.gps
        runtime = gps.get_runtime()
        try:
            report = runtime.intents.reconcile_waiting(
                schedule_name, f"boundary_{edge}", pauser(gps)
            )
        except Busy:
            yield dg.SkipReason(ticks.BUSY_EDGE)
            return
        requests, skipped = claim_launches(
            runtime, plan_requests(report.plans), origin=origin, instance=context.instance
        )
        requests = [served_tags(r, context.scheduled_execution_time) for r in requests]
        for line in skipped:
            context.log.info(f"skipped {line}")
        if not requests:
            edge_reason = None if skipped else runtime.intents.skipped_edge(schedule_name, window)
            yield dg.SkipReason(ticks.edge_skip(skipped, edge_reason))
        yield from requests

    return evaluate


def served_tags(request: dg.RunRequest, tick: datetime | None) -> dg.RunRequest:
    """``request`` tagged with its tick's instant and, when the tick ran late and the engine
    serves another boundary (the intent of now, never of the tick), a ``gps/late_tick`` line
    saying which: Dagster's ``dagster/scheduled_execution_time`` names the tick only."""
    if tick is None:
        return request
    tags = {**request.tags, names.TAG_TICK: tick.isoformat()}
    late = ticks.late_tick(tick, request.tags.get(names.TAG_INTERVAL, ""))
    if late:
        tags[names.TAG_LATE_TICK] = late
    return request.with_replaced_attrs(tags=tags)


MAX_BOUNDARY_SCHEDULES = 200


def all_boundary_schedules(
    schedules: Iterable[Schedule],
    jobs: Mapping[str, dg.JobDefinition],
    default_status: dg.DefaultScheduleStatus,
    *,
    max_boundary_schedules: int = MAX_BOUNDARY_SCHEDULES,
    leads: Mapping[tuple[str, str], float] | None = None,
) -> list[dg.ScheduleDefinition]:
    """Start and end schedules of every recurring window of each schedule (and early ones of
    a ready-by window), or the fixed ``gps_every_minute`` above the limit."""
    specs = list(schedules)
    edges = [(s.name, w, e) for s in specs for w, e, _ in window_crons(s, leads)]
    if len(edges) > max_boundary_schedules:
        return [build_minute_schedule(jobs, default_status)]
    named = names.boundary_schedule_names(edges)
    out: list[dg.ScheduleDefinition] = []
    for schedule in specs:
        job = jobs[job_for(TransitionOrder(schedule.transition_order).value)]
        for window, edge, crons in window_crons(schedule, leads):
            name = named[(schedule.name, window, edge)]
            out.append(
                dg.ScheduleDefinition(
                    name=name,
                    cron_schedule=list(crons) if len(crons) > 1 else crons[0],
                    job=job,
                    execution_fn=_tick(schedule.name, edge, schedule_origin(name), window),
                    execution_timezone=schedule.timezone,
                    required_resource_keys={"gps"},
                    default_status=default_status,
                    tags={names.TAG_SCHEDULE: schedule.name},
                    description=f"{edge} of window {window} of deploy schedule "
                    f"{schedule.name}: a pass.",
                )
            )
    return out


def build_minute_schedule(
    jobs: Mapping[str, dg.JobDefinition], default_status: dg.DefaultScheduleStatus
) -> dg.ScheduleDefinition:
    """Every minute: a pass over the schedules the due index says are due, as the boundary
    sensor does every second (whichever claims a schedule first serves it). A Dagster schedule
    launches one job: the release-first plans go in one ``gps_transition_batch`` run; an
    acquire-first plan is left unclaimed to the reconcile sensor."""
    from gps_dagster.dagster_defs.batches import BATCH_JOB

    job = jobs[BATCH_JOB]
    origin = schedule_origin(names.MINUTE_SCHEDULE)

    def evaluate(context: dg.ScheduleEvaluationContext) -> Iterator[dg.RunRequest | dg.SkipReason]:
        from gps_dagster.dagster_defs.sensors import serve_due

        runtime = context.resources.gps.get_runtime()
        now = runtime.clock.now()
        requests, lines = serve_due(
            runtime,
            now,
            origin=origin,
            trigger="boundary",
            instance=context.instance,
            always_batch=True,
            release_first_only=True,
        )
        if requests:
            yield from requests
            return
        yield dg.SkipReason(ticks.minute_skip(lines, runtime.engine.upcoming_due(now, 5)))

    return dg.ScheduleDefinition(
        name=names.MINUTE_SCHEDULE,
        cron_schedule="* * * * *",
        job=job,
        execution_fn=evaluate,
        required_resource_keys={"gps"},
        default_status=default_status,
        description="Boundaries of every deploy schedule (the fleet is too large for one Dagster "
        "schedule per window): a pass over the schedules due this minute.",
    )
