"""Effective intent, intent intervals and boundaries (SPEC R-EVAL-1…5).

Pure: time is always a parameter (the domain never reads the clock), every input instant must be
aware, and every returned instant is local time of the schedule's zone with a fixed-offset tzinfo
(see ``crons.local_time`` for why). The core is a sweep over the sorted occurrence edges of the
windows naming a target: between two consecutive edges the set of active windows is constant, so the
intent is too. This is what makes a weekly timeline cost microseconds rather than the 10,080
evaluations of a minute-by-minute scan.

Intents are compared with ``Intent.key`` (desired_state, replicas,
allow_downtime); ``source`` and ``occurrence_start`` only say where an
interval's intent came from at its start.
"""

# Decisions embodied here (docs/decisions.md):
# * “Returned datetimes carry a fixed offset”
# * “Reports split intervals where the window in force changes; the engine does not”
# * “The evaluator answers from the span its last search swept”

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, TypeVar

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.occurrences import (
    WORK_BUDGET,
    CompiledSchedule,
    CompiledWindow,
    IntentKey,
    compile_schedule,
    cost,
    floor_ts,
)
from gps_dagster.domain.spec import DesiredState, Schedule

__all__ = [
    "SENTINEL_START",
    "Boundary",
    "Intent",
    "IntentInterval",
    "boundaries",
    "current_interval",
    "effective_intent",
    "horizon_days",
    "intervals",
    "max_range_days",
    "next_boundary",
    "window_edges",
]

DAY = 86_400
SEARCH_CHUNKS_DAYS = (1, 8, 32, 400)
"""How far ``current_interval``/``next_boundary`` look, growing, before giving up."""
SEARCH_CALLS = 3
"""Shares of ``WORK_BUDGET`` in ``current_interval``: the search back, forward, one-shot probes."""
SENTINEL_START = datetime(1970, 1, 1, tzinfo=UTC)
"""Start of an interval whose true start lies beyond every search: stable from pass to pass."""


@dataclass(frozen=True, slots=True)
class Intent:
    """What a target should be at an instant (R-EVAL-1)."""

    desired_state: DesiredState
    replicas: int | None
    """None = do not touch scale."""
    allow_downtime: bool
    source: str
    """The window in force, or ``"default"``."""
    occurrence_start: datetime | None
    """Start of the window occurrence in force; None for the default."""

    @property
    def key(self) -> IntentKey:
        """The part that defines an interval: compare intents with this, not ``==``."""
        return (self.desired_state, self.replicas, self.allow_downtime)


@dataclass(frozen=True, slots=True)
class IntentInterval:
    """A maximal range of constant intent; identity (schedule, version, target, start)."""

    target: str
    start: datetime
    end: datetime | None
    """None only from ``current_interval`` when no change is found within 400 days."""
    intent: Intent


@dataclass(frozen=True, slots=True)
class Boundary:
    """An instant where a target's intent changes."""

    at: datetime
    target: str
    before: Intent
    after: Intent


_K = TypeVar("_K")
_V = TypeVar("_V")
_Segment = tuple[int, IntentKey, str, int | None]  # start, key, source, occurrence start


def _sweep(
    c: CompiledSchedule,
    target: str,
    s: int,
    e: int,
    occs: dict[int, list[tuple[int, int]]],
    by_source: bool = False,
) -> list[_Segment]:
    """Maximal segments of constant intent key (and source, with ``by_source``) over [s, e)."""
    windows = c.by_target[target]
    default = c.defaults[target]
    if not windows:
        return [(s, default, "default", None)]
    events: list[tuple[int, int, int, int]] = []
    for rank, w in enumerate(windows):
        for a, b in occs[w.index]:
            events.append((a if a > s else s, 1, rank, a))
            if b < e:
                events.append((b, -1, rank, a))
    events.sort()
    count = [0] * len(windows)
    occ_start = [0] * len(windows)
    out: list[_Segment] = []
    i, n = 0, len(events)
    at = s
    while True:
        while i < n and events[i][0] == at:
            _, delta, rank, a = events[i]
            count[rank] += delta
            if delta > 0:
                occ_start[rank] = a
            i += 1
        seg = _winner(windows, count, occ_start, target, default, at)
        if not out or out[-1][1] != seg[1] or (by_source and out[-1][2] != seg[2]):
            out.append(seg)
        if i >= n:
            return out
        at = events[i][0]


def _winner(
    windows: tuple[CompiledWindow, ...],
    count: list[int],
    occ_start: list[int],
    target: str,
    default: IntentKey,
    at: int,
) -> _Segment:
    for rank, w in enumerate(windows):
        if count[rank] > 0:
            return (at, w.states[target], w.name, occ_start[rank])
    return (at, default, "default", None)


def _occurrences(
    c: CompiledSchedule, targets: list[str], s: int, e: int
) -> dict[int, list[tuple[int, int]]]:
    wanted = {w.index for t in targets for w in c.by_target[t]}
    return {w.index: w.occurrences(c.tz, s, e) for w in c.windows if w.index in wanted}


def segments(
    c: CompiledSchedule, targets: list[str], s: int, e: int, *, by_source: bool = False
) -> dict[str, list[_Segment]]:
    """Segments per target over [s, e) (epoch seconds) — the integer core of ``intervals``."""
    occs = _occurrences(c, targets, s, e)
    return {t: _sweep(c, t, s, e, occs, by_source) for t in targets}


def _targets(c: CompiledSchedule, targets: list[str] | tuple[str, ...] | None) -> list[str]:
    if targets is None:
        return list(c.targets)
    for t in targets:
        if t not in c.defaults:
            raise KeyError(f"'{t}' is not a target of this schedule")
    return list(targets)


class _Clock:
    """Epoch seconds -> datetime in the schedule zone, memoised within one call."""

    def __init__(self, c: CompiledSchedule, pinned: dict[int, datetime]) -> None:
        self.tz = c.tz
        self.memo = pinned

    def __call__(self, ts: int) -> datetime:
        dt = self.memo.get(ts)
        if dt is None:
            dt = self.memo[ts] = local_time(ts, self.tz)
        return dt


def _intent(seg: _Segment, clock: _Clock) -> Intent:
    state, replicas, allow = seg[1]
    occ = seg[3]
    return Intent(state, replicas, allow, seg[2], None if occ is None else clock(occ))


def intervals(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    targets: list[str] | tuple[str, ...] | None = None,
    by_source: bool = False,
) -> dict[str, list[IntentInterval]]:
    """Intent intervals per target over ``[start, end)``, clipped to the range (R-EVAL-3).

    ``by_source``: also split where the window in force changes while the intent does not
    (a hand-over of equal intents): what reports show as "decided by" (R-EVAL-5); the
    engine keeps the merged intervals (their identity is the intent's)."""
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    if e <= s:
        raise ValueError("end must be after start")
    clock = _Clock(c, {s: local_time(start, c.tz), e: local_time(end, c.tz)})
    out: dict[str, list[IntentInterval]] = {}
    for t, segs in segments(c, _targets(c, targets), s, e, by_source=by_source).items():
        rows = []
        for k, seg in enumerate(segs):
            stop = segs[k + 1][0] if k + 1 < len(segs) else e
            rows.append(IntentInterval(t, clock(seg[0]), clock(stop), _intent(seg, clock)))
        out[t] = rows
    return out


def effective_intent(schedule: Schedule, target: str, at: datetime) -> Intent:
    """The intent of ``target`` at ``at`` (R-EVAL-1)."""
    c = compile_schedule(schedule)
    t = floor_ts(at)
    seg = segments(c, _targets(c, [target]), t, t + 1)[target][0]
    return _intent(seg, _Clock(c, {}))


def _chunks(c: CompiledSchedule) -> tuple[int, ...]:
    """The growing search spans in days, the last one the horizon (at most 400 days).

    The horizon is the longest span whose chunks, searched back and forward for
    every target, fit in ``WORK_BUDGET``: 400 days for ordinary schedules,
    less for dense ones (hundreds of occurrences a day), so that the cost of a
    call never grows with how often windows fire. ``checks.density_checks``
    refuses at write time a schedule that cannot afford one day.
    """
    hit = _CHUNKS.get(id(c))
    if hit is not None and hit[0] is c:
        return hit[1]
    chunks = _fit_chunks(c)
    if len(_CHUNKS) > 4096:
        _CHUNKS.clear()
    _CHUNKS[id(c)] = (c, chunks)
    return chunks


_CHUNKS: dict[int, tuple[CompiledSchedule, tuple[int, ...]]] = {}


def _fit_chunks(c: CompiledSchedule) -> tuple[int, ...]:
    price = cost(c)
    for k in range(len(SEARCH_CHUNKS_DAYS), 0, -1):
        small = SEARCH_CHUNKS_DAYS[: k - 1]
        left = WORK_BUDGET // SEARCH_CALLS - sum(price.of(d) for d in small)
        days = min(SEARCH_CHUNKS_DAYS[k - 1], price.max_days(left)) if left > 0 else 0
        if days >= 1 and (not small or days > small[-1]):
            return (*small, days)
    return (1,)


TIMELINE_SHARE = 3
"""A timeline evaluates three times (intervals, desired GPUs, window bands)."""


def max_range_days(schedule: Schedule) -> int:
    """Most days one timeline or ranged dry-run of ``schedule`` may cover within ``WORK_BUDGET``.

    At least 7 for every schedule validation accepts (``checks.density_checks``)."""
    return cost(compile_schedule(schedule)).max_days(WORK_BUDGET // TIMELINE_SHARE)


def horizon_days(schedule: Schedule) -> int:
    """How far ``current_interval`` looks for a change, back and forward (<= 400 days)."""
    return _chunks(compile_schedule(schedule))[-1]


def _change_before(c: CompiledSchedule, target: str, t: int) -> tuple[int | None, _Segment]:
    """The last intent change at or before ``t`` (None if none found) and the segment it starts."""
    segs: list[_Segment] = []
    chunks = _chunks(c)
    for days in chunks:
        segs = segments(c, [target], t - days * DAY, t + 1)[target]
        if len(segs) > 1:
            return segs[-1][0], segs[-1]
    lookback = t - chunks[-1] * DAY
    key = segs[-1][1]
    probes = max(1, WORK_BUDGET // SEARCH_CALLS // max(1, cost(c).fixed))
    for edge in reversed([e for e in c.one_shot_edges if e < lookback][-probes:]):
        pair = segments(c, [target], edge - 1, edge + 1)[target]
        if len(pair) > 1 and pair[1][1] == key:
            return edge, pair[1]
    return None, segs[0]


def _change_after(
    c: CompiledSchedule, targets: list[str], t: int
) -> tuple[int | None, dict[str, list[_Segment]]]:
    """The first intent change of any of ``targets`` strictly after ``t``, with the segments of
    the span swept to find it (every change of that span)."""
    by_target: dict[str, list[_Segment]] = {}
    for days in _chunks(c):
        by_target = segments(c, targets, t, t + days * DAY + 1)
        found = [segs[1][0] for segs in by_target.values() if len(segs) > 1]
        if found:
            return min(found), by_target
    return None, by_target


def current_interval(schedule: Schedule, target: str, at: datetime) -> IntentInterval:
    """The interval containing ``at`` with its TRUE start (stable identity) and next change.

    ``start`` is the last change at or before ``at`` (searched back 1, 8, 32, 400
    days — fewer for a dense schedule, see ``horizon_days`` — then over every
    one-shot edge at any distance), else ``SENTINEL_START``; ``end`` is the next
    change within the horizon, else None. A one-shot edge beyond
    the 400-day lookback is taken as the start when the intent changes there to
    the current intent (nothing having changed in the 400 days before ``at``).
    The sentinel interval's ``intent`` is the one at the start of the lookback.
    """
    c = compile_schedule(schedule)
    t = floor_ts(at)
    known = _KNOWN_INTERVALS.get((id(c), target))
    if known is not None and known.compiled is c:
        served = known.serve(t)
        if served is not None:
            return served
    _targets(c, [target])
    clock = _Clock(c, {})
    change, seg = _change_before(c, target, t)
    start = SENTINEL_START if change is None else clock(change)
    nxt, ahead = _change_after(c, [target], t)
    found = IntentInterval(target, start, None if nxt is None else clock(nxt), _intent(seg, clock))
    if change is not None and nxt is not None:
        later = ahead[target][1:]
        _remember(
            _KNOWN_INTERVALS,
            (id(c), target),
            _KnownIntervals(
                c,
                target,
                _chunks(c)[-1] * DAY,
                [change, *(x[0] for x in later)],
                [seg, *later],
                clock,
            ),
        )
    return found


class _KnownIntervals:
    """What one ``current_interval`` search learnt of a target: the change points from the
    interval's start through the span searched forward, with their segments.

    A later instant ``t`` of that span whose next change is known gets the answer the search
    would give, by the search's own rules, without searching (a pass asks every target on every
    pass; the demo's windows change every two minutes):

    * the last change at or before ``t`` is the greatest known point ≤ ``t`` (the span was swept
      whole), and the search back finds it while it lies after ``t - horizon`` (beyond that the
      search answers the sentinel or a one-shot edge: not served);
    * the first change after ``t`` is the next known point, closer to ``t`` than the span's
      search reached, so the search forward finds it too.
    Only an interval with a found start is kept (the sentinel's intent depends on ``t``)."""

    __slots__ = ("clock", "compiled", "horizon", "points", "segs", "target")

    def __init__(
        self,
        compiled: CompiledSchedule,
        target: str,
        horizon: int,
        points: list[int],
        segs: list[_Segment],
        clock: _Clock,
    ) -> None:
        self.compiled, self.target, self.horizon = compiled, target, horizon
        self.points, self.segs, self.clock = points, segs, clock

    def serve(self, t: int) -> IntentInterval | None:
        """The interval of ``t`` when both its start and its end are known points (an instant
        before the first or after the last known point is not: nothing is known there)."""
        i = bisect.bisect_right(self.points, t) - 1
        if i < 0 or i + 1 >= len(self.points) or self.points[i] <= t - self.horizon:
            return None
        clock = self.clock
        return IntentInterval(
            self.target,
            clock(self.points[i]),
            clock(self.points[i + 1]),
            _intent(self.segs[i], clock),
        )


_KNOWN_INTERVALS: dict[tuple[int, str], _KnownIntervals] = {}
_KNOWN_CHANGES: dict[int, tuple[CompiledSchedule, int, list[int]]] = {}
"""Per compiled schedule, the last ``next_boundary`` search: ``(c, asked at, every change of any
target in the span it swept after that instant)``. An instant of ``[asked at, last change)`` has
its next change among them, closer than the search reached."""
MAX_REMEMBERED = 20_000


def _remember(memo: dict[_K, _V], key: _K, value: _V) -> None:
    if len(memo) > MAX_REMEMBERED:
        memo.clear()
    memo[key] = value


def boundaries(schedule: Schedule, start: datetime, end: datetime) -> list[Boundary]:
    """Every intent change at an instant in ``[start, end)``, sorted by time then target."""
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    clock = _Clock(c, {})
    out: list[Boundary] = []
    for t, segs in segments(c, list(c.targets), s - 1, e).items():
        for prev, seg in itertools.pairwise(segs):
            out.append(Boundary(clock(seg[0]), t, _intent(prev, clock), _intent(seg, clock)))
    out.sort(key=lambda b: (b.at, b.target))
    return out


def next_boundary(schedule: Schedule, after: datetime) -> datetime | None:
    """The first instant strictly after ``after`` where any target's intent changes (≤ 400 days)."""
    c = compile_schedule(schedule)
    t = floor_ts(after)
    known = _KNOWN_CHANGES.get(id(c))
    if known is not None and known[0] is c and known[1] <= t:
        i = bisect.bisect_right(known[2], t)
        if i < len(known[2]):
            return local_time(known[2][i], c.tz)
    found, ahead = _change_after(c, list(c.targets), t)
    if found is None:
        return None
    changes = sorted({seg[0] for segs in ahead.values() for seg in segs[1:]})
    _remember(_KNOWN_CHANGES, id(c), (c, t, changes))
    return local_time(found, c.tz)


def window_edges(
    schedule: Schedule, start: datetime, end: datetime
) -> list[tuple[datetime, str, Literal["start", "end"]]]:
    """Every occurrence start and end in ``[start, end)``, even where intent does not change."""
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    raw: list[tuple[int, int, str]] = []
    for w in c.windows:
        for a, b in w.occurrences(c.tz, s, e):
            if a >= s:
                raw.append((a, 1, w.name))
            if s <= b < e:
                raw.append((b, 0, w.name))
    raw.sort()
    clock = _Clock(c, {})
    return [(clock(ts), name, "start" if kind else "end") for ts, kind, name in raw]
