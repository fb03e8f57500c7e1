"""The desired-GPU line counts a time-sliced reservation's GPU once, never one per member."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.timeline import gpu_timeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MONDAY = datetime.fromisoformat("2026-10-19T00:00:00+07:00")


def test_gpu42_desired_line_counts_the_shared_gpu_once_plus_the_static_tenants() -> None:
    pool = parse_pool((EXAMPLES / "gpu42-pool.yaml").read_text())
    schedule = parse_schedule((EXAMPLES / "gpu42-schedule.json").read_text())
    segments = gpu_timeline(
        schedule, pool, MONDAY, datetime.fromisoformat("2026-10-21T00:00:00+07:00")
    )
    static = sum(f.gpus for f in pool.sim.foreign if f.kind == "static")
    shared = [r for r in pool.reservations if r.mode == "time_sliced"]
    assert len(shared) == 1 and len(shared[0].gpu_uuids) == 1
    members = [d for d in pool.deploys if d.reservation is not None]
    assert len(members) == 3  # three members share one GPU
    assert {s.desired_gpus for s in segments} == {static + 1}
    assert not any(s.overcommit for s in segments)
