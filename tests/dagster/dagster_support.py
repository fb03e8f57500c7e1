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


def seed_schedule(rt: Runtime, path: Path = EXAMPLES / "seed-schedule.json", **changes: Any) -> Schedule:
    spec = parse_schedule(path.read_text(), source=str(path), horizon_start=rt.clock.now())
    if changes:
        spec = spec.model_copy(update=changes)
    rt.store.apply_schedule(spec, now=rt.clock.now())
    return spec


def faketime(at: datetime) -> list[str]:
    """A command prefix that starts a child's wall clock at ``at`` (Debian ``faketime``).

    Only for a third-party process that reads the wall clock itself (Dagster's CLI checks
    partition keys against its own now); the product's processes get ``GPS_CLOCK`` instead.
    """
    exe = shutil.which("faketime")
    if exe is None:
        raise RuntimeError("faketime is not installed: apt-get install faketime (make test does)")
    return [exe, "-f", "@" + at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")]
