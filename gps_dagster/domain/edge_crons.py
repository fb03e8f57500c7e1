"""Cron strings for the boundary schedules of a recurring window (the Dagster layer's boundary
schedules compile them; pure, so they live beside the cron parser).

A window ``cron`` + ``duration`` starts at each cron fire and ends ``duration``
of elapsed time later. Dagster needs the end as crons too: the start fires
shifted by the duration, grouped into as few 5-field crons as possible (a
``ScheduleDefinition`` takes a list). When the shift cannot be written as
crons (seconds in the duration, a day carry on a window restricted by day of
month or month) ``end_crons`` returns ``None`` and the end boundary is served
by the boundary sensor instead.

Only the *moment* matters: a tick merely asks the engine for a pass over the
schedule, and the engine evaluates intent itself. A tick shifted by DST (Dagster
fires ``30 2`` at 03:00 on spring-forward day, and an elapsed-time end moves
by an hour in wall time across a change) is therefore harmless: the engine
opens the transition at the true boundary on the sensor's next tick.
"""

# Decisions embodied here (docs/decisions.md):
# * “Ready-by on Dagster: an early cron fixed at load, the due index for the rest”

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import timedelta

from gps_dagster.domain.crons import CronExpr, parse_cron
from gps_dagster.domain.spec import RecurringWindow, Schedule

_DAY = 24 * 60
MAX_CRONS = 24


def _fmt(values: frozenset[int] | set[int], lo: int, hi: int) -> str:
    """``{0,1,2,5}`` → ``0-2,5``; the full range → ``*``."""
    ordered: list[int] = sorted(values)
    if ordered == list(range(lo, hi + 1)):
        return "*"
    parts: list[str] = []
    start = prev = ordered[0]
    for v in [*ordered[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def _day_fields(expr: CronExpr, shift_days: int = 0) -> str:
    dom = _fmt(expr.days, 1, 31) if expr.days_restricted else "*"
    mon = _fmt(expr.months, 1, 12)
    dow = "*"
    if expr.weekdays_restricted:
        dow = _fmt({(d + shift_days) % 7 for d in expr.weekdays}, 0, 6)
    return f"{dom} {mon} {dow}"


def start_crons(cron: str) -> tuple[str, ...]:
    """The window's own cron, normalised to numbers (macros and names expanded)."""
    expr = parse_cron(cron)
    return (f"{_fmt(expr.minutes, 0, 59)} {_fmt(expr.hours, 0, 23)} {_day_fields(expr)}",)


def end_crons(cron: str, duration: timedelta) -> tuple[str, ...] | None:
    """Crons firing at every occurrence end, or ``None`` when not expressible."""
    seconds = int(duration.total_seconds())
    if seconds % 60 or duration >= timedelta(days=7):
        return None
    expr = parse_cron(cron)
    days, rem = divmod(seconds // 60, _DAY)
    by_carry: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for minute_of_day in expr.minutes_of_day:
        carry, shifted = divmod(minute_of_day + rem, _DAY)
        carry += days
        if carry and (expr.days_restricted or len(expr.months) < 12):
            return None
        by_carry[carry][shifted // 60].add(shifted % 60)
    crons: list[str] = []
    for carry, hours in sorted(by_carry.items()):
        groups: dict[frozenset[int], set[int]] = defaultdict(set)
        for hour, minutes in hours.items():
            groups[frozenset(minutes)].add(hour)
        for minute_set, hour_set in sorted(groups.items(), key=lambda kv: min(kv[1])):
            crons.append(
                f"{_fmt(minute_set, 0, 59)} {_fmt(hour_set, 0, 23)} {_day_fields(expr, carry)}"
            )
    return tuple(crons) if 0 < len(crons) <= MAX_CRONS else None


def early_crons(cron: str, lead: timedelta) -> tuple[str, ...] | None:
    """Crons firing ``lead`` before every fire (whole minutes, so never before the early start),
    or ``None`` when an early tick would fall on the previous day (the due index serves it)."""
    minutes = int(lead.total_seconds()) // 60
    if minutes <= 0:
        return None
    expr = parse_cron(cron)
    by_hour: dict[int, set[int]] = defaultdict(set)
    for minute_of_day in expr.minutes_of_day:
        shifted = minute_of_day - minutes
        if shifted < 0:
            return None
        by_hour[shifted // 60].add(shifted % 60)
    by_minutes: dict[frozenset[int], set[int]] = defaultdict(set)
    for hour, mins in by_hour.items():
        by_minutes[frozenset(mins)].add(hour)
    crons = tuple(
        f"{_fmt(mins, 0, 59)} {_fmt(hours, 0, 23)} {_day_fields(expr)}"
        for mins, hours in sorted(by_minutes.items(), key=lambda kv: min(kv[1]))
    )
    return crons if len(crons) <= MAX_CRONS else None


def window_crons(
    schedule: Schedule, leads: Mapping[tuple[str, str], float] | None = None
) -> list[tuple[str, str, tuple[str, ...]]]:
    """(window, edge, crons) of every recurring window edge a cron can express.

    ``leads`` ((schedule, window) -> seconds): a ready-by window also gets an ``early`` edge,
    its start shifted back by the lead learned when the code location loaded (R-NEXT-1); the
    engine decides whether the lead has come, so a tick early by a changed lead is harmless.
    """
    out = []
    for window in schedule.windows:
        if not isinstance(window, RecurringWindow):
            continue
        lead = (leads or {}).get((schedule.name, window.name))
        early = early_crons(window.cron, timedelta(seconds=lead)) if lead else None
        for edge, crons in (
            ("early", early),
            ("start", start_crons(window.cron)),
            ("end", end_crons(window.cron, window.duration)),
        ):
            if edge == "early" and crons is None:
                continue
            if crons is not None:  # else not expressible as crons: gps_boundaries serves it
                out.append((window.name, edge, crons))
    return out
