"""Helpers of the Dagster layer tests: a real runtime (store + simulated pool + engine)
on a virtual clock, served to Dagster through ``StaticRuntime``."""

from __future__ import annotations

import shutil
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import EngineConfig
from gps_dagster.runtime import Runtime, build_runtime, settings_from_env

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
MONDAY_0800 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
"""Monday 2026-10-19 08:00 +07: the seed's business-hours boundary (A on, B off)."""

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def make_runtime(
    url: str,
    *,
    start: datetime = MONDAY_0800,
    pool_file: Path = EXAMPLES / "seed-pool-10.yaml",
    config: EngineConfig | None = None,
) -> Runtime:
    """The composition root's runtime on a virtual clock, the pool file freshly loaded."""
    clock = VirtualClock(start)
    settings = settings_from_env({}, db_url=url, pool_file=str(pool_file))
    rt = build_runtime(settings, clock=clock, config=config, reload_pool=True)
    rt.store.set_gate("enforce", now=clock.now())
    return rt


def seed_schedule(
    rt: Runtime, path: Path = EXAMPLES / "seed-schedule.json", **changes: Any
) -> Schedule:
    spec = parse_schedule(path.read_text(), source=str(path))
    if changes:
        spec = spec.model_copy(update=changes)
    rt.store.apply_schedule(spec, now=rt.clock.now())
    return spec


RUN_KEY_TAG = "dagster/run_key"
SENSOR_NAME_TAG = "dagster/sensor_name"
SCHEDULE_NAME_TAG = "dagster/schedule_name"
SCHEDULED_TIME_TAG = "dagster/scheduled_execution_time"


class Daemon:
    """The Dagster daemon around ``evaluate_tick``, with its run-key dedup per origin.

    The real daemon drops a request only when a run with the same run key was
    launched by the *same* sensor (``fetch_existing_runs`` in
    ``dagster/_daemon/sensor.py`` matches the sensor-name tag) or by the same
    schedule for the same tick (``_get_existing_run_for_request`` in
    ``dagster/_scheduler/scheduler.py``); FACTS.md verified it under
    ``dagster dev``. Evaluating and submitting are separate steps so that a test
    can interleave two origins the way the daemon's threads do. Runs execute in
    process at once, tagged like the daemon tags them.
    """

    def __init__(self, defs: dg.Definitions, rt: Any, instance: dg.DagsterInstance) -> None:
        self.defs, self.rt, self.instance = defs, rt, instance
        self.cursors: dict[str, str | None] = {}
        self.requested: list[dg.RunRequest] = []

    def _resources(self) -> dict[str, Any]:
        from gps_dagster.dagster_defs.resources import as_resource

        return {"gps": as_resource(self.rt)}

    def evaluate_sensor(self, name: str) -> list[dg.RunRequest]:
        sensor = self.defs.resolve_sensor_def(name)
        ctx = dg.build_sensor_context(
            instance=self.instance, cursor=self.cursors.get(name), resources=self._resources()
        )
        data = sensor.evaluate_tick(ctx)
        self.cursors[name] = data.cursor
        self.requested += data.run_requests or []
        return list(data.run_requests or [])

    def evaluate_schedule(self, name: str, at: datetime) -> list[dg.RunRequest]:
        schedule = self.defs.resolve_schedule_def(name)
        ctx = dg.build_schedule_context(
            instance=self.instance, scheduled_execution_time=at, resources=self._resources()
        )
        requests = list(schedule.evaluate_tick(ctx).run_requests or [])
        self.requested += requests
        return requests

    def submit(
        self,
        requests: list[dg.RunRequest],
        *,
        sensor: str | None = None,
        schedule: str | None = None,
        at: datetime | None = None,
    ) -> list[dg.ExecuteInProcessResult]:
        """Launch what the daemon would launch for this origin's requests."""
        origin = {SENSOR_NAME_TAG: sensor} if sensor else {SCHEDULE_NAME_TAG: schedule or ""}
        if schedule and at is not None:
            origin[SCHEDULED_TIME_TAG] = at.astimezone(UTC).isoformat()
        results = []
        for request in requests:
            tags = {**request.tags, **origin}
            if request.run_key:
                tags[RUN_KEY_TAG] = request.run_key
                seen = {RUN_KEY_TAG: request.run_key, **origin}
                if self.instance.get_runs_count(dg.RunsFilter(tags=seen)):
                    continue  # the daemon drops a key this origin already launched
            job = self.defs.resolve_job_def(request.job_name or "")
            results.append(
                job.execute_in_process(
                    run_config=request.run_config,
                    tags=tags,
                    instance=self.instance,
                    raise_on_error=False,
                )
            )
        return results

    def tick_sensor(self, name: str) -> list[dg.ExecuteInProcessResult]:
        return self.submit(self.evaluate_sensor(name), sensor=name)

    def runs(self, **tags: str) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs(dg.RunsFilter(tags=tags)))


def faketime(at: datetime) -> list[str]:
    """A command prefix that starts a child's wall clock at ``at`` (Debian ``faketime``).

    Only for a third-party process that reads the wall clock itself (Dagster's CLI checks
    partition keys against its own now); the product's processes get ``GPS_CLOCK`` instead.
    """
    exe = shutil.which("faketime")
    if exe is None:
        raise RuntimeError("faketime is not installed: apt-get install faketime (make test does)")
    return [exe, "-f", "@" + at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")]
