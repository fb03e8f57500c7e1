"""Boundary schedules: Dagster cron ticks at the start and end of every recurring window.

A tick asks the engine for a pass over its deploy schedule and launches the
plans it opens; it never decides start vs end from its own wall time (DST
moves ticks: Dagster fires ``30 2`` at 03:00 on spring-forward day). The
engine evaluates intent itself, so an early, late or extra tick is harmless.
One-shot windows and ends no cron can express are served by the boundary
sensor (``gps_boundaries``) within seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.crons import end_crons, start_crons
from gps_dagster.dagster_defs.plans import claim_launches, job_for, plan_requests, schedule_origin
from gps_dagster.domain.spec import RecurringWindow, Schedule, TransitionOrder
from gps_dagster.engine.errors import Busy


def _tick(schedule_name: str, edge: str, origin: str) -> Any:
    def evaluate(context: dg.ScheduleEvaluationContext) -> Iterator[dg.RunRequest | dg.SkipReason]:
        runtime = context.resources.gps.get_runtime()
        try:
            report = runtime.engine.reconcile(schedule=schedule_name, trigger=f"boundary_{edge}")
        except Busy:
            yield dg.SkipReason("another pass holds the lock; the reconcile sensor follows up")
            return
        requests, skipped = claim_launches(
            runtime, plan_requests(report.plans), origin=origin, instance=context.instance
        )
        for line in skipped:
            context.log.info(f"skipped {line}")
        if not requests:
            why = "; ".join(skipped) or "intent unchanged or already processed"
            yield dg.SkipReason(f"no transition to run ({why})")
        yield from requests

    return evaluate


def boundary_schedules(
    schedule: Schedule, jobs: Mapping[str, dg.JobDefinition], default_status: dg.DefaultScheduleStatus
) -> list[dg.ScheduleDefinition]:
    """Start and end schedules of every recurring window of ``schedule``."""
    job = jobs[job_for(TransitionOrder(schedule.transition_order).value)]
    out: list[dg.ScheduleDefinition] = []
    for window in schedule.windows:
        if not isinstance(window, RecurringWindow):
            continue
        edges: list[tuple[str, tuple[str, ...] | None]] = [
            ("start", start_crons(window.cron)),
            ("end", end_crons(window.cron, window.duration)),
        ]
        for edge, crons in edges:
            if crons is None:
                continue  # not expressible as crons: gps_boundaries serves it
            name = names.boundary_schedule_name(schedule.name, window.name, edge)
            out.append(
                dg.ScheduleDefinition(
                    name=name,
                    cron_schedule=list(crons) if len(crons) > 1 else crons[0],
                    job=job,
                    execution_fn=_tick(schedule.name, edge, schedule_origin(name)),
                    execution_timezone=schedule.timezone,
                    required_resource_keys={"gps"},
                    default_status=default_status,
                    tags={names.TAG_SCHEDULE: schedule.name},
                    description=f"{edge} of window {window.name} of deploy schedule {schedule.name}: a pass.",
                )
            )
    return out


def all_boundary_schedules(
    schedules: Iterable[Schedule], jobs: Mapping[str, dg.JobDefinition], default_status: dg.DefaultScheduleStatus
) -> list[dg.ScheduleDefinition]:
    out: list[dg.ScheduleDefinition] = []
    for schedule in schedules:
        out.extend(boundary_schedules(schedule, jobs, default_status))
    return out
