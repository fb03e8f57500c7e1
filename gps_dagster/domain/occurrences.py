"""A schedule compiled for evaluation: integer epoch seconds, no pydantic in hot loops.

Why: the evaluator runs for thousands of schedules per second (benchmark goal
10,000 weekly timelines in < 5 s), and every pass of the engine asks for the
current interval. Pydantic attribute access, ``ZoneInfo`` lookups and cron
parsing are done once per schedule here; occurrences are then plain
``(start, end)`` integer pairs that the sweep in ``evaluator`` sorts.

Instants are whole epoch seconds (fractions are floored): crons fire on whole
minutes and one-shot bounds are expected to be whole seconds.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from datetime import date, datetime
from zoneinfo import ZoneInfo

from gps_dagster.domain.calendars import SkipDays
from gps_dagster.domain.crons import CronExpr
from gps_dagster.domain.spec import DesiredState, OneShotWindow, RecurringWindow, Schedule

IntentKey = tuple[DesiredState, int | None, bool]
"""(desired_state, replicas, allow_downtime): what makes two intents equal."""


@dataclass(frozen=True, slots=True)
class CompiledWindow:
    index: int
    name: str
    priority: int
    cron: CronExpr | None
    """None for a one-shot window."""
    duration: int
    """Recurring: seconds of elapsed time. One-shot: ``end - start``."""
    start: int
    """One-shot only: ``active_from`` as epoch seconds."""
    end: int
    states: dict[str, IntentKey]
    """Target -> resolved intent key (``allow_downtime`` None inherits the target default)."""
    skip: SkipDays | None = None
    """Recurring only: local dates whose occurrences do not fire (R-NEXT-2)."""

    def occurrences(self, tz: ZoneInfo, start: int, end: int) -> list[tuple[int, int]]:
        """Occurrences ``(start, end)`` that intersect ``[start, end)``, in order (skips removed)."""
        if self.cron is None:
            return [(self.start, self.end)] if self.start < end and self.end > start else []
        duration = self.duration
        fires = self.cron.fire_epochs(tz, start - duration + 1, end)
        if self.skip is not None:
            fires = [f for f in fires if not self.skip.skips(local_date(f, tz))]
        return [(f, f + duration) for f in fires]

    def skipped(self, tz: ZoneInfo, start: int, end: int) -> list[tuple[int, int, str]]:
        """The occurrences a skip removed from ``[start, end)``: ``(start, end, reason)``."""
        if self.cron is None or self.skip is None:
            return []
        out = []
        for f in self.cron.fire_epochs(tz, start - self.duration + 1, end):
            why = self.skip.reason(local_date(f, tz))
            if why is not None:
                out.append((f, f + self.duration, why))
        return out


def local_date(ts: int, tz: ZoneInfo) -> date:
    """The schedule zone's calendar date of an instant (what a holiday skip compares)."""
    return datetime.fromtimestamp(ts, tz).date()


@dataclass(frozen=True, slots=True)
class CompiledSchedule:
    tz: ZoneInfo
    targets: tuple[str, ...]
    defaults: dict[str, IntentKey]
    windows: tuple[CompiledWindow, ...]
    by_target: dict[str, tuple[CompiledWindow, ...]]
    """Windows naming each target, highest priority first (ties: document order)."""
    one_shot_edges: tuple[int, ...]
    """Every one-shot ``active_from``/``active_until``, sorted."""


def floor_ts(value: datetime) -> int:
    """Epoch seconds of an aware datetime (floored); naive datetimes are refused."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: the evaluator needs aware datetimes")
    return math.floor(value.timestamp())


def _compile_window(index: int, win: RecurringWindow | OneShotWindow, sched: Schedule) -> CompiledWindow:
    defaults = {t.model_deploy_id: t.default_allow_downtime for t in sched.targets}
    states: dict[str, IntentKey] = {}
    for st in win.states:
        allow = st.allow_downtime if st.allow_downtime is not None else defaults.get(st.model_deploy_id, False)
        states[st.model_deploy_id] = (st.desired_state, st.replicas, allow)
    if isinstance(win, RecurringWindow):
        secs = int(win.duration.total_seconds())
        skip = win.skip.days() if win.skip is not None else None
        return CompiledWindow(index, win.name, win.priority, win.cron_expr, secs, 0, 0, states, skip)
    start, end = floor_ts(win.active_from), floor_ts(win.active_until)
    return CompiledWindow(index, win.name, win.priority, None, end - start, start, end, states)


_TZ: dict[str, ZoneInfo] = {}
_CACHE: dict[int, tuple[weakref.ref[Schedule], CompiledSchedule]] = {}


def zone(name: str) -> ZoneInfo:
    """Cached ``ZoneInfo`` by name."""
    tz = _TZ.get(name)
    if tz is None:
        tz = _TZ[name] = ZoneInfo(name)
    return tz


def compile_schedule(sched: Schedule) -> CompiledSchedule:
    """Compile (memoised per schedule object) for evaluation."""
    hit = _CACHE.get(id(sched))
    if hit is not None and hit[0]() is sched:
        return hit[1]
    windows = tuple(_compile_window(i, w, sched) for i, w in enumerate(sched.windows))
    targets = sched.target_ids
    defaults = {t.model_deploy_id: (t.default_state, t.default_replicas, t.default_allow_downtime) for t in sched.targets}
    ranked = sorted(windows, key=lambda w: (-w.priority, w.index))
    by_target = {t: tuple(w for w in ranked if t in w.states) for t in targets}
    edges = sorted({e for w in windows if w.cron is None for e in (w.start, w.end)})
    compiled = CompiledSchedule(zone(sched.timezone), targets, defaults, windows, by_target, tuple(edges))
    if len(_CACHE) > 20_000:
        _CACHE.clear()
    _CACHE[id(sched)] = (weakref.ref(sched), compiled)
    return compiled
