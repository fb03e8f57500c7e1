"""R-NEXT-1 at the Dagster boundary: a ready-by window gets an early schedule at its lead.

The seed with A ``ready_by`` and no start observed yet: the lead is the engine's defaults
(start 300 s + B's stop 60 s = 6 min), so ``…__business_hours__early`` fires ``54 7 * * 1-5``
in the schedule's zone; its tick at 07:54 opens the 08:00 swap (interval start 08:00) and the
run executes it. The start tick at 08:00 then finds the boundary already served.
"""

from __future__ import annotations

from datetime import datetime

import dagster as dg
from dagster_support import make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.resources import as_resource
from gps_dagster.domain.edge_crons import early_crons

SEED = "gpu-pool-h100-shared"


def _tick(
    schedule: dg.ScheduleDefinition, rt: object, instance: dg.DagsterInstance
) -> dg.ScheduleExecutionData:
    ctx = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=rt.clock.now(),  # type: ignore[attr-defined]
        resources={"gps": as_resource(rt)},
    )  # type: ignore[arg-type]
    return schedule.evaluate_tick(ctx)  # type: ignore[return-value]


def test_the_early_schedule_fires_at_the_lead_and_opens_the_boundary_plan(
    sqlite_url: str, instance: dg.DagsterInstance
) -> None:
    rt = make_runtime(sqlite_url, start=datetime.fromisoformat("2026-10-19T07:00:00+07:00"))
    spec = seed_schedule(rt)
    rt.store.apply_schedule(
        spec.model_copy(
            update={
                "ready_by": True,
                "targets": (
                    spec.targets[0].model_copy(update={"ready_by": True}),
                    spec.targets[1].model_copy(update={"ready_by": False}),
                ),
            }
        ),
        now=rt.clock.now(),
    )
    rt.engine.run_pass()  # the night state: A stopped, B running, converged
    defs = build_definitions(StaticRuntime(rt))
    early = defs.resolve_schedule_def(names.boundary_schedule_name(SEED, "business-hours", "early"))
    assert (early.cron_schedule, early.execution_timezone) == ("54 7 * * 1-5", "Asia/Ho_Chi_Minh")
    rt.clock.set(datetime.fromisoformat("2026-10-19T07:53:00+07:00"))
    assert not _tick(early, rt, instance).run_requests  # not yet inside the lead
    rt.clock.set(datetime.fromisoformat("2026-10-19T07:54:01+07:00"))
    data = _tick(early, rt, instance)
    [request] = data.run_requests or []
    assert request.tags[names.TAG_TRIGGER] == "boundary_early"
    assert "2026-10-19T08:00:00" in request.tags[names.TAG_INTERVAL], request.tags
    job = defs.resolve_job_def(request.job_name or "")
    assert job.execute_in_process(
        run_config=request.run_config,
        instance=instance,
        tags={**request.tags, "dagster/run_key": request.run_key or ""},
        raise_on_error=False,
    ).success
    status = {s.deploy_id: s for s in rt.store.list_status(SEED)}
    assert status["md-llama70b"].interval_start == datetime.fromisoformat(
        "2026-10-19T08:00:00+07:00"
    )
    rt.clock.set(datetime.fromisoformat("2026-10-19T08:00:02+07:00"))
    start = defs.resolve_schedule_def(names.boundary_schedule_name(SEED, "business-hours", "start"))
    assert not _tick(start, rt, instance).run_requests  # already served by the early tick


def test_early_crons_shift_back_within_the_day_or_give_up() -> None:
    from datetime import timedelta

    assert early_crons("0 8 * * 1-5", timedelta(seconds=480)) == ("52 7 * * 1-5",)
    assert early_crons("0 8 * * 1-5", timedelta(seconds=470)) == ("53 7 * * 1-5",)  # never before
    assert early_crons("0 8,20 * * *", timedelta(minutes=30)) == ("30 7,19 * * *",)
    assert early_crons("5 0 * * *", timedelta(minutes=10)) is None  # the day before: the due index
    assert early_crons("0 8 * * *", timedelta(seconds=30)) is None
