"""A schedule compiled for evaluation: integer epoch seconds, no pydantic in hot loops.

Why: the evaluator runs for thousands of schedules per second (benchmark goal
10,000 weekly timelines in < 5 s), and every pass of the engine asks for the
current interval. Pydantic attribute access, ``ZoneInfo`` lookups and cron
parsing are done once per schedule here; occurrences are then plain
``(start, end)`` integer pairs that the sweep in ``evaluator`` sorts.

Instants are whole epoch seconds (fractions are floored): crons fire on whole
minutes and one-shot bounds are expected to be whole seconds.
"""

# Decisions embodied here (docs/decisions.md):
# * “Evaluation cost is bounded by a work budget, not by how often a window fires”
# * “Holidays: `holidays` decides, its version is part of the document”

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
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
        """Maximal runs ``(start, end)`` of activity that intersect ``[start, end)``, in order.

        Back-to-back occurrences (the next fire at or before the end of the
        previous occurrence) form one run: ``* * * * *`` for ``1m`` is one run
        per stretch of days, not 1,440 occurrences a day (see ``runs``). Occurrences starting on a
        skipped local date do not fire (R-NEXT-2).
        """
        if self.cron is None:
            return [(self.start, self.end)] if self.start < end and self.end > start else []
        return runs(self.cron, self.duration, tz, start, end, skip=self.skip)

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


def _compile_window(
    index: int, win: RecurringWindow | OneShotWindow, sched: Schedule
) -> CompiledWindow:
    defaults = {t.model_deploy_id: t.default_allow_downtime for t in sched.targets}
    states: dict[str, IntentKey] = {}
    for st in win.states:
        allow = (
            st.allow_downtime
            if st.allow_downtime is not None
            else defaults.get(st.model_deploy_id, False)
        )
        states[st.model_deploy_id] = (st.desired_state, st.replicas, allow)
    if isinstance(win, RecurringWindow):
        secs = int(win.duration.total_seconds())
        skip = win.skip.days() if win.skip is not None else None
        return CompiledWindow(
            index, win.name, win.priority, win.cron_expr, secs, 0, 0, states, skip
        )
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
    defaults = {
        t.model_deploy_id: (t.default_state, t.default_replicas, t.default_allow_downtime)
        for t in sched.targets
    }
    ranked = sorted(windows, key=lambda w: (-w.priority, w.index))
    by_target = {t: tuple(w for w in ranked if t in w.states) for t in targets}
    edges = sorted({e for w in windows if w.cron is None for e in (w.start, w.end)})
    compiled = CompiledSchedule(
        zone(sched.timezone), targets, defaults, windows, by_target, tuple(edges)
    )
    if len(_CACHE) > 20_000:
        _CACHE.clear()
    _CACHE[id(sched)] = (weakref.ref(sched), compiled)
    return compiled


# -- runs of back-to-back occurrences, in closed form (R-EVAL-4) ----------------------------------

WORK_BUDGET = 30_000
"""Most work units (local days stepped + runs produced) one evaluation call may spend.

Write-time checks (``checks.density_checks``) refuse a schedule whose cheapest useful call
would need more; the search horizon of ``current_interval`` shrinks so that
every call of an accepted schedule stays inside it."""


@dataclass(slots=True)
class Work:
    """Work units spent by the evaluator inside ``counting()`` (tests, benchmarks, range
    dry-runs)."""

    units: int = 0
    parent: Work | None = None
    """The enclosing ``counting()`` block, which counts these units too."""


_WORK: ContextVar[Work | None] = ContextVar("gps_evaluator_work", default=None)


@contextlib.contextmanager
def counting() -> Iterator[Work]:
    """Count the evaluator's work units of the calls made inside the block."""
    work = Work(parent=_WORK.get())
    token = _WORK.set(work)
    try:
        yield work
    finally:
        _WORK.reset(token)


_TOTAL = Work()
"""Every unit spent in this process, whatever the thread (a server's worker threads too)."""


def total_units() -> int:
    """Work units spent in this process so far: compare before and after a request."""
    return _TOTAL.units


def spend(units: int) -> None:
    """Add ``units`` to the current ``counting()`` block, if any, and to the process total."""
    _TOTAL.units += units
    work = _WORK.get()
    while work is not None:
        work.units += units
        work = work.parent


@lru_cache(maxsize=4096)
def day_pattern(expr: CronExpr, duration: int) -> tuple[tuple[int, int], ...]:
    """The runs of one ordinary day as (first fire, end) seconds after local midnight.

    Consecutive fires ``a < b`` of the day join when ``b - a <= duration``: the
    occurrence of ``a`` lasts until ``b`` starts (or later). Computed once per
    (cron, duration) from ``minutes_of_day`` (at most 1,440 values)."""
    out: list[list[int]] = []
    for mod in expr.minutes_of_day:
        at = mod * 60
        if out and at <= out[-1][1]:
            out[-1][1] = max(out[-1][1], at + duration)
        else:
            out.append([at, at + duration])
    return tuple((a, b) for a, b in out)


_DAYS: dict[tuple[str, int], tuple[int, bool]] = {}


def _day(tz: ZoneInfo, ordinal: int) -> tuple[int, bool]:
    """(epoch of local midnight's wall arithmetic base, plain) for local day ``ordinal``.

    ``plain``: the UTC offset at midnight equals the next midnight's (no DST
    transition that day), so fires are ``base + seconds after midnight``."""
    key = (tz.key, ordinal)
    hit = _DAYS.get(key)
    if hit is None:
        day = date.fromordinal(ordinal)
        start = datetime(day.year, day.month, day.day, tzinfo=tz)
        off0 = start.utcoffset()
        off1 = (start + timedelta(days=1)).utcoffset()
        wall0 = (ordinal - _EPOCH_ORDINAL) * 86_400
        base = wall0 - int(off0.total_seconds()) if off0 is not None else wall0
        hit = (base, off0 == off1)
        if len(_DAYS) > 200_000:
            _DAYS.clear()
        _DAYS[key] = hit
    return hit


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def _local_ordinal(ts: int, tz: ZoneInfo) -> int:
    return datetime.fromtimestamp(ts, tz).date().toordinal()


_DST_RUNS: dict[tuple[int, int, str, int], tuple[tuple[int, int], ...]] = {}


def _day_runs(
    expr: CronExpr, duration: int, tz: ZoneInfo, ordinal: int
) -> Iterable[tuple[int, int]]:
    base, plain = _day(tz, ordinal)
    if plain:
        return [(base + a, base + b) for a, b in day_pattern(expr, duration)]
    key = (id(expr), duration, tz.key, ordinal)  # expr stays alive: parse_cron memoises it
    hit = _DST_RUNS.get(key)
    if hit is None:
        hit = _DST_RUNS[key] = _merge_fires(expr.fires_on(tz, ordinal), duration)
        if len(_DST_RUNS) > 20_000:
            _DST_RUNS.clear()
    return hit


def _merge_fires(fires: Iterable[int], duration: int) -> tuple[tuple[int, int], ...]:
    """A DST day: its exact fires (R-EVAL-2), joined as ``day_pattern`` joins a plain day's."""
    out: list[tuple[int, int]] = []
    for f in fires:
        if out and f <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], f + duration))
        else:
            out.append((f, f + duration))
    return tuple(out)


def runs(
    expr: CronExpr,
    duration: int,
    tz: ZoneInfo,
    start: int,
    end: int,
    *,
    skip: SkipDays | None = None,
) -> list[tuple[int, int]]:
    """Maximal runs of activity of a recurring window that intersect ``[start, end)``.

    Steps local days (skipping months the cron never fires in) from the day of
    ``start - duration`` and takes each matching day's runs from its
    ``day_pattern`` (exact fires on DST days), joining a run with the previous
    one when it starts at or before the previous end. The cost is one unit per
    day stepped plus one per run, whatever the number of fires: the runs are
    never built from the fires. A run that began before the first day stepped
    starts, here, at its first fire on or after that day.
    """
    ordinal = _local_ordinal(start - duration, tz)
    last = _local_ordinal(end, tz)
    out: list[tuple[int, int]] = []
    stepped = 0
    months = expr.months
    while ordinal <= last:
        day = date.fromordinal(ordinal)
        if day.month not in months:
            nxt = date(day.year + day.month // 12, day.month % 12 + 1, 1)
            stepped += 1
            ordinal = nxt.toordinal()
            continue
        stepped += 1
        if expr.matches_day(day) and (
            skip is None or not skip.skips(day)
        ):  # a day's runs start on it
            for a, b in _day_runs(expr, duration, tz, ordinal):
                if a >= end:
                    break
                if out and a <= out[-1][1]:
                    if b > out[-1][1]:
                        out[-1] = (out[-1][0], b)
                else:
                    out.append((a, b))
        ordinal += 1
    kept = [r for r in out if r[1] > start]
    spend(stepped + len(out))
    return kept


def _per_day(w: CompiledWindow) -> int:
    """Work units of one more local day of ``w`` in ``runs`` (a step and its runs), at most."""
    return 0 if w.cron is None else 1 + len(day_pattern(w.cron, w.duration))


def _per_call(w: CompiledWindow) -> int:
    """Work units of ``w`` in any ``runs`` call whatever its range (the lookback, the edges)."""
    return 1 if w.cron is None else _per_day(w) * (w.duration // 86_400 + 3)


@dataclass(frozen=True, slots=True)
class Cost:
    """What evaluating every target over ``days`` local days costs: ``per_day * days + fixed``."""

    per_day: int
    fixed: int

    def of(self, days: int) -> int:
        return self.per_day * days + self.fixed

    def max_days(self, budget: int = WORK_BUDGET) -> int:
        """Most days one call may cover within ``budget`` (0: not even one)."""
        return max(0, (budget - self.fixed) // self.per_day) if self.per_day else 10**6


def cost(c: CompiledSchedule) -> Cost:
    """Upper bound of one evaluation of every target of ``c`` (the sweep of a dry-run or pass)."""
    per_day = fixed = 0
    for t in c.targets:
        fixed += 1
        for w in c.by_target[t]:
            per_day += _per_day(w)
            fixed += _per_call(w)
    return Cost(per_day, fixed)
