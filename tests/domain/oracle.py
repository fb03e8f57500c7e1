"""Brute-force minute-by-minute oracle for the evaluator (tests and bench only).

Deliberately naive and independent of ``gps_dagster.domain.evaluator``: it
walks every UTC minute, reads the local wall clock, matches the cron fields on
it (firing a repeated wall time only at its first occurrence, and firing the
walls skipped by a spring-forward gap at the first minute after the gap), marks
every minute each occurrence covers, and picks the highest-priority window per
minute. Only the cron *field sets* come from the parser (its own tests check
those against croniter). Schedules must be whole-minute (crons always are).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import holidays

from gps_dagster.domain.crons import CronExpr
from gps_dagster.domain.spec import OneShotWindow, RecurringWindow, Schedule

Row = tuple[int, int, tuple[object, ...], str]  # start, end, key, source


def _wall_matches(expr: CronExpr, wall: datetime) -> bool:
    return wall.minute in expr.minutes and wall.hour in expr.hours and expr.matches_day(wall.date())


def oracle_fires(expr: CronExpr, tz: ZoneInfo, start: int, end: int) -> list[int]:
    """Fire instants (epoch seconds, whole minutes) in [start, end), minute by minute."""
    fires: list[int] = []
    seen: set[datetime] = set()
    first = start - start % 60
    prev_wall = datetime.fromtimestamp(first - 60, tz).replace(tzinfo=None)
    for ts in range(first, end, 60):
        wall = datetime.fromtimestamp(ts, tz).replace(tzinfo=None)
        fire = False
        skipped = prev_wall + timedelta(minutes=1)
        while skipped < wall:  # walls jumped over by a spring-forward gap
            fire = fire or _wall_matches(expr, skipped)
            skipped += timedelta(minutes=1)
        if wall not in seen and _wall_matches(expr, wall):
            fire = True
        seen.add(wall)
        if fire and ts >= start:
            fires.append(ts)
        prev_wall = wall
    return fires


def _skipped(w: RecurringWindow, tz: ZoneInfo, fire: int) -> bool:
    if w.skip is None:
        return False
    day: date = datetime.fromtimestamp(fire, tz).date()
    if day in w.skip.dates:
        return True
    cal = w.skip.holidays
    if cal is None:
        return False
    table = holidays.country_holidays(
        cal.country, subdiv=cal.subdivision, years=day.year, categories=cal.categories
    )
    return day in table


def oracle_intervals(schedule: Schedule, start: int, end: int) -> dict[str, list[Row]]:
    """Intervals per target over [start, end) (epoch seconds, whole minutes)."""
    tz = ZoneInfo(schedule.timezone)
    n = (end - start) // 60
    allow_default = {t.model_deploy_id: t.default_allow_downtime for t in schedule.targets}
    active: list[list[bool]] = []
    for w in schedule.windows:
        marks = [False] * n
        if isinstance(w, RecurringWindow):
            dur = int(w.duration.total_seconds())
            fires = oracle_fires(w.cron_expr, tz, start - dur - 86400, end)
            spans = [(f, f + dur) for f in fires if not _skipped(w, tz, f)]
        else:
            assert isinstance(w, OneShotWindow)
            spans = [(int(w.active_from.timestamp()), int(w.active_until.timestamp()))]
        for a, b in spans:
            for m in range(max(a, start), min(b, end), 60):
                marks[(m - start) // 60] = True
        active.append(marks)
    out: dict[str, list[Row]] = {}
    for t in schedule.targets:
        tid = t.model_deploy_id
        rows: list[Row] = []
        for i in range(n):
            key: tuple[object, ...] = (
                t.default_state,
                t.default_replicas,
                t.default_allow_downtime,
            )
            source, best = "default", None
            for k, w in enumerate(schedule.windows):
                st = next((s for s in w.states if s.model_deploy_id == tid), None)
                if st is None or not active[k][i] or (best is not None and w.priority <= best):
                    continue
                best = w.priority
                allow = allow_default[tid] if st.allow_downtime is None else st.allow_downtime
                key, source = (st.desired_state, st.replicas, allow), w.name
            ts = start + i * 60
            if rows and rows[-1][2] == key:
                rows[-1] = (rows[-1][0], ts + 60, key, rows[-1][3])
            else:
                rows.append((ts, ts + 60, key, source))
        out[tid] = rows
    return out
