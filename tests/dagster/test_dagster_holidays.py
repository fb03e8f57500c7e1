"""R-NEXT-2 at the Dagster boundary: a cron tick on a public holiday opens nothing and says why.

Dagster's cron still fires ``0 8 * * 1-5`` on Vietnam's National Day (Wed 2026-09-02); the
engine decides intent, so the tick finds no new interval and its skip reason names the holiday
and the package version that decided. The next business day's tick launches the swap.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
from dagster_support import EXAMPLES, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.resources import as_resource
from gps_dagster.domain.calendars import PACKAGE

SEED = "gpu-pool-h100-shared"
TZ_OFFSET = "+07:00"


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text + TZ_OFFSET)


def test_the_start_tick_on_national_day_skips_with_the_holiday_and_the_next_day_launches(
    sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = make_runtime(sqlite_url, start=_at("2026-09-01T19:00:00"))
    seed_schedule(rt, EXAMPLES / "holiday-schedule.json")
    for _ in range(40):  # the night before: B running, A stopped, converged
        rt.engine.run_pass()
        rt.clock.advance(timedelta(seconds=15))
    defs = build_definitions(StaticRuntime(rt))
    start = defs.resolve_schedule_def(names.boundary_schedule_name(SEED, "business-hours", "start"))
    rt.clock.set(_at("2026-09-02T08:00:02"))
    ctx = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=rt.clock.now(),
        resources={"gps": as_resource(rt)},
    )
    holiday = start.evaluate_tick(ctx)
    assert not holiday.run_requests
    assert holiday.skip_message == (
        f"no transition to run (business-hours skipped on 2026-09-02: National Day ({PACKAGE}))"
    )
    rt.clock.set(_at("2026-09-03T08:00:02"))
    ctx = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=rt.clock.now(),
        resources={"gps": as_resource(rt)},
    )
    workday = start.evaluate_tick(ctx)
    assert [r.tags[names.TAG_TRIGGER] for r in workday.run_requests or []] == ["boundary_start"]
