"""The timeline as a JSON-able document: the contract of ``timeline --format json`` and the API.

One builder for both edges, so the CLI and ``GET …/{name}/timeline`` answer
the same document for the same schedule and range. Timestamps are RFC 3339
with the offset of the schedule's zone. ``window_occurrences`` adds what the
timeline page draws as bands: every occurrence of every window in the range,
with its kind and priority.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.evaluator import IntentInterval, intervals
from gps_dagster.domain.occurrences import compile_schedule, floor_ts
from gps_dagster.domain.pool import PoolSpec
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline import GpuSegment, gpu_timeline

__all__ = ["build_timeline", "gpu_json", "interval_json", "iso", "timeline_json", "window_occurrences"]


def build_timeline(
    schedule: Schedule, pool: PoolSpec | None, start: datetime, end: datetime
) -> tuple[dict[str, Any], list[GpuSegment] | None]:
    """The timeline document of ``[start, end)`` and its GPU segments (None without a pool).

    Raises ``SpecInvalid`` when the pool does not know a target (no GPU size for it).
    """
    rows = intervals(schedule, start, end, by_source=True)  # "decided by" is the window in force
    gpu = gpu_timeline(schedule, pool, start, end) if pool is not None else None
    return timeline_json(schedule, start, end, rows, gpu), gpu


def iso(value: datetime) -> str:
    """RFC 3339 with offset, seconds precision when the instant is whole."""
    return value.isoformat(timespec="seconds" if value.microsecond == 0 else "microseconds")


def interval_json(row: IntentInterval) -> dict[str, Any]:
    return {
        "start": iso(row.start),
        "end": iso(row.end) if row.end is not None else None,
        "desired_state": row.intent.desired_state.value,
        "replicas": row.intent.replicas,
        "allow_downtime": row.intent.allow_downtime,
        "source": row.intent.source,
    }


def gpu_json(seg: GpuSegment) -> dict[str, Any]:
    out: dict[str, Any] = {
        "start": iso(seg.start),
        "end": iso(seg.end),
        "desired_gpus": seg.desired_gpus,
        "capacity": seg.capacity,
    }
    if seg.overcommit:
        out["overcommit"] = True
    return out


def timeline_json(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    rows: dict[str, list[IntentInterval]],
    gpu: list[GpuSegment] | None,
) -> dict[str, Any]:
    """The timeline contract (see README): intervals per target, and the desired-GPU line."""
    tz = schedule.tz
    doc: dict[str, Any] = {
        "schedule": schedule.name,
        "timezone": schedule.timezone,
        "from": iso(local_time(start, tz)),
        "to": iso(local_time(end, tz)),
        "targets": {t: [interval_json(r) for r in rs] for t, rs in rows.items()},
    }
    if gpu is not None:
        doc["gpu"] = [gpu_json(s) for s in gpu]
    return doc


def window_occurrences(schedule: Schedule, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Every window with its kind, priority and the occurrences that intersect ``[start, end)``."""
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    out = []
    for spec, compiled in zip(schedule.windows, c.windows, strict=True):
        out.append({
            "name": spec.name,
            "kind": spec.kind,
            "priority": spec.priority,
            "targets": [st.model_deploy_id for st in spec.states],
            "occurrences": [
                {"start": iso(local_time(a, c.tz)), "end": iso(local_time(b, c.tz))}
                for a, b in compiled.occurrences(c.tz, s, e)
            ],
        })
    return out
