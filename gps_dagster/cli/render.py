"""Rendering timelines and validation results as JSON (a contract) and text tables.

The JSON shape of ``timeline --format json`` is read by other tools: keep the
keys stable. Timestamps are RFC 3339 with the offset of the schedule's zone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.evaluator import IntentInterval
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline import GpuSegment


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
    """The timeline contract (see the issue text and README)."""
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


def table(headers: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(lines)


def timeline_table(doc: dict[str, Any]) -> str:
    """Human view of the timeline contract."""
    out = [f"schedule {doc['schedule']} ({doc['timezone']})  {doc['from']} → {doc['to']}"]
    for target, rows in doc["targets"].items():
        body = [
            [r["start"], r["end"], r["desired_state"], "-" if r["replicas"] is None else str(r["replicas"]),
             "yes" if r["allow_downtime"] else "no", r["source"]]
            for r in rows
        ]
        out += ["", f"target {target}", table(["start", "end", "state", "replicas", "downtime", "source"], body)]
    if "gpu" in doc:
        body = [
            [g["start"], g["end"], str(g["desired_gpus"]), str(g["capacity"]), "OVERCOMMIT" if g.get("overcommit") else ""]
            for g in doc["gpu"]
        ]
        out += ["", "desired GPUs", table(["start", "end", "desired", "capacity", ""], body)]
    return "\n".join(out)


def errors_text(source: str, errors: tuple[FieldError, ...]) -> str:
    head = f"{source}: {len(errors)} problem(s)"
    return "\n".join([head, *(f"  {e}" for e in errors)])


def errors_json(source: str, errors: tuple[FieldError, ...]) -> dict[str, Any]:
    return {"source": source, "valid": not errors, "errors": [e.as_dict() for e in errors]}
