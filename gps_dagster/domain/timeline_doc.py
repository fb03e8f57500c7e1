"""The timeline as a JSON-able document: the contract of ``timeline --format json`` and the API.

One builder for both edges, so the CLI and ``GET …/{name}/timeline`` answer
the same document for the same schedule and range. Timestamps are RFC 3339
with the offset of the schedule's zone. ``window_occurrences`` adds what the
timeline page draws as bands: every occurrence of every window in the range,
with its kind and priority.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.evaluator import IntentInterval, intervals
from gps_dagster.domain.occurrences import compile_schedule, floor_ts
from gps_dagster.domain.pool import PoolSpec
from gps_dagster.domain.readyby import Timing, leads_in
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline import GpuSegment, gpu_timeline

__all__ = [
    "ReadyByTimings",
    "build_timeline",
    "gpu_json",
    "interval_json",
    "iso",
    "ready_by_rows",
    "skipped_at",
    "skipped_edge",
    "skipped_occurrences",
    "timeline_json",
    "window_occurrences",
]


def build_timeline(
    schedule: Schedule,
    pool: PoolSpec | None,
    start: datetime,
    end: datetime,
    *,
    timings: ReadyByTimings | None = None,
) -> tuple[dict[str, Any], list[GpuSegment] | None]:
    """The timeline document of ``[start, end)`` and its GPU segments (None without a pool).

    ``timings``: learned start/stop times and the cap (R-NEXT-1); without them a ready-by
    schedule's leads are shown from ``ReadyByTimings.defaults()``.
    Raises ``SpecInvalid`` when the pool does not know a target (no GPU size for it).
    """
    rows = intervals(schedule, start, end, by_source=True)  # "decided by" is the window in force
    gpu = gpu_timeline(schedule, pool, start, end) if pool is not None else None
    doc = timeline_json(schedule, start, end, rows, gpu)
    if any(schedule.is_ready_by(t) for t in schedule.target_ids):
        doc["ready_by"] = ready_by_rows(
            schedule, start, end, timings or ReadyByTimings.defaults(schedule)
        )
    return doc, gpu


@dataclass(frozen=True)
class ReadyByTimings:
    """What the leads are computed from: per target start and stop times, and the cap."""

    start: dict[str, Timing]
    stop: dict[str, Timing]
    cap_s: float

    @classmethod
    def defaults(
        cls, schedule: Schedule, start_s: float = 300.0, stop_s: float = 60.0, cap_s: float = 1800.0
    ) -> ReadyByTimings:
        """The engine's configured defaults (no history): what a lead is before any start."""
        ids = schedule.target_ids
        return cls({t: Timing(start_s, 0) for t in ids}, {t: Timing(stop_s, 0) for t in ids}, cap_s)


def ready_by_rows(
    schedule: Schedule, start: datetime, end: datetime, timings: ReadyByTimings
) -> list[dict[str, Any]]:
    """Every planned early start in ``[start, end)``: boundary, early start, reason, figures."""
    leads = leads_in(
        schedule,
        start,
        end,
        start_times=timings.start,
        stop_times=timings.stop,
        cap_s=timings.cap_s,
    )
    tz = schedule.tz
    rows = []
    for lead in leads:
        row = lead.as_dict()
        row["boundary"] = iso(local_time(lead.boundary, tz))
        row["early_start"] = iso(local_time(lead.early_at, tz))
        rows.append(row)
    return rows


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
    """The timeline contract (docs/usage.md): intervals per target, and the desired-GPU line."""
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
    if any(getattr(w, "skip", None) is not None for w in schedule.windows):
        doc["skipped"] = skipped_occurrences(schedule, start, end)
    return doc


def skipped_occurrences(schedule: Schedule, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Occurrences a ``skip`` removed in ``[start, end)``, sorted: window, span, day, why, who
    decided.

    ``decided_by`` names the holidays package version for a holiday (None for a listed
    date): a changed holiday table shows up here as a timeline diff.
    """
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    rows: list[tuple[int, str, dict[str, Any]]] = []
    for spec, compiled in zip(schedule.windows, c.windows, strict=True):
        cal = getattr(getattr(spec, "skip", None), "holidays", None)
        for a, b, why in compiled.skipped(c.tz, s, e):
            listed = why == "listed date"
            rows.append(
                (
                    a,
                    spec.name,
                    {
                        "window": spec.name,
                        "start": iso(local_time(a, c.tz)),
                        "end": iso(local_time(b, c.tz)),
                        "date": local_time(a, c.tz).date().isoformat(),
                        "reason": why,
                        "calendar": None if listed or cal is None else _calendar_name(cal.key),
                        "decided_by": None if listed or cal is None else cal.decided_by,
                    },
                )
            )
    return [row for _, _, row in sorted(rows, key=lambda r: (r[0], r[1]))]


def skipped_at(schedule: Schedule, at: datetime) -> dict[str, list[str]]:
    """Per target, the skipped occurrences (of windows naming it) that would contain ``at``.

    For dry-run: "A is stopped at 10:00" reads "business-hours skipped on 2026-09-02: National
    Day (holidays 0.108)" instead of a silent default.
    """
    c = compile_schedule(schedule)
    t = floor_ts(at)
    out: dict[str, list[str]] = {}
    for spec, compiled in zip(schedule.windows, c.windows, strict=True):
        for a, _b, why in compiled.skipped(c.tz, t, t + 1):
            note = _skip_note(spec, a, why, c)
            for st in spec.states:
                out.setdefault(st.model_deploy_id, []).append(note)
    return out


def _skip_note(spec: Any, fire: int, why: str, c: Any) -> str:
    decided = getattr(getattr(spec, "skip", None), "holidays", None)
    by = f" ({decided.decided_by})" if decided is not None and why != "listed date" else ""
    return f"{spec.name} skipped on {local_time(fire, c.tz).date().isoformat()}: {why}{by}"


def skipped_edge(schedule: Schedule, window: str, at: datetime) -> str | None:
    """Why an edge of ``window`` at ``at`` has no occurrence: the skip that removed it, or None.

    For the boundary schedules: a Dagster cron still ticks on a holiday; its skip reason
    names the holiday instead of "intent unchanged".
    """
    c = compile_schedule(schedule)
    t = floor_ts(at)
    for spec, compiled in zip(schedule.windows, c.windows, strict=True):
        if spec.name != window:
            continue
        for a, b, why in compiled.skipped(c.tz, t - 60, t + 61):
            if abs(a - t) <= 60 or abs(b - t) <= 60:
                return _skip_note(spec, a, why, c)
    return None


def _calendar_name(key: tuple[str, str | None, tuple[str, ...]]) -> str:
    country, subdivision, categories = key
    where = f"{country}-{subdivision}" if subdivision else country
    return f"{where} {','.join(categories)}"


def window_occurrences(schedule: Schedule, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Every window with its kind, priority and the occurrences that intersect ``[start, end)``."""
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    out = []
    for spec, compiled in zip(schedule.windows, c.windows, strict=True):
        band: dict[str, Any] = {
            "name": spec.name,
            "kind": spec.kind,
            "priority": spec.priority,
            "targets": [st.model_deploy_id for st in spec.states],
            "occurrences": [
                {"start": iso(local_time(a, c.tz)), "end": iso(local_time(b, c.tz))}
                for a, b in compiled.occurrences(c.tz, s, e)
            ],
        }
        if compiled.skip is not None:  # the page marks these days (R-NEXT-2)
            band["skipped"] = [
                {"start": iso(local_time(a, c.tz)), "end": iso(local_time(b, c.tz)), "reason": why}
                for a, b, why in compiled.skipped(c.tz, s, e)
            ]
        out.append(band)
    return out
