"""A boundary schedule's tick that runs late is tagged with what it serves (issue 20 §2).

Dagster fires a tick missed while its daemon was down when the daemon comes back, with the
tick's own instant in ``dagster/scheduled_execution_time``; the engine serves the intent of
*now* (SPEC R-EVAL: never the tick's time). The run's tags say both."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
from dagster_support import MONDAY_0800, Runtime

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.resources import as_resource

START = "gpu_pool_h100_shared__business_hours__start"


def _tick(defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance) -> dg.RunRequest:
    ctx = dg.build_schedule_context(
        instance=instance, scheduled_execution_time=MONDAY_0800, resources={"gps": as_resource(rt)}
    )
    (request,) = defs.resolve_schedule_def(START).evaluate_tick(ctx).run_requests or []
    return request


def test_a_tick_on_time_names_its_tick_and_no_late_line(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    request = _tick(defs, rt, instance)
    assert request.tags[names.TAG_TICK] == MONDAY_0800.isoformat()
    assert request.tags[names.TAG_INTERVAL].startswith("2026-10-19T08:00:00")
    assert names.TAG_LATE_TICK not in request.tags


def test_a_late_tick_says_it_serves_the_current_boundary_not_its_own(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    rt.clock.advance(timedelta(days=1, minutes=10).total_seconds())  # the daemon was down a day
    request = _tick(defs, rt, instance)
    assert request.tags[names.TAG_TICK] == MONDAY_0800.isoformat()
    assert request.tags[names.TAG_INTERVAL].startswith("2026-10-20T08:00:00")  # Tuesday's
    assert request.tags[names.TAG_LATE_TICK] == (
        f"tick of {MONDAY_0800.isoformat()} serves the boundary of "
        f"{request.tags[names.TAG_INTERVAL]}"
    )
