"""Where the fires of crons can collide, decided over a fixed span of days, never "from today".

Why a fixed span: a file's verdict must not depend on the day it is
validated. From 1901 to 2099 the Gregorian calendar repeats every 28 years
(weekdays, months, days of month and leap days line up again), and so do DST
rules written as "last Sunday of March", so 28 consecutive years hold every
distinct day pattern of every cron. ``MARGIN_YEARS`` more let a pattern that
starts near the end of the 28 years finish: the longest gap a cron can have
between two fires inside that period is four years (29 February to 29
February), and a recurring duration must be shorter than its gaps.

Why bitsets: day ``i`` of the span is bit ``i`` of a Python int, so "A fires
on day i and B on day i + k", for every ``i`` at once, is
``bits_a & (bits_b >> k)``. Away from DST transitions a cron fires at the
same wall times (``minutes_of_day``) on every day it matches, so an overlap
of two windows on one pair of days ``(i, i + k)`` is an overlap on every
pair with that shift: a few big-integer operations per shift replace one
step per fire (``* * * * *`` fires 17 million times in 33 years).
Occurrences that contain a transition instant, and the days they start on,
are computed exactly instead (``next_fire``, the evaluator's DST rules).
"""

# Decisions embodied here (docs/decisions.md):
# * “Validation looks at a fixed span, never "from today"”

from __future__ import annotations

import bisect
import calendar
import itertools
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from gps_dagster.domain.crons import CronExpr, resolve_wall

__all__ = [
    "SPAN_END",
    "SPAN_START",
    "Recurrence",
    "first_common",
    "first_overlap",
    "min_gap",
    "next_fire",
    "one_shot_meets",
]

DAY = 86_400
CYCLE_YEARS = 28
MARGIN_YEARS = 5
SPAN_START = date(2026, 1, 1)
"""First local day of the span the cross-field checks look at (a fixed date, not today)."""
SPAN_END = date(SPAN_START.year + CYCLE_YEARS + MARGIN_YEARS, 1, 1)
_O0 = SPAN_START.toordinal()
_N = SPAN_END.toordinal() - _O0


@lru_cache(maxsize=1)
def _calendar() -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """Span days as bitsets by (month, day of month) and by (month, cron weekday)."""
    size = _N // 8 + 1
    by_dom = {(m, d): bytearray(size) for m in range(1, 13) for d in range(1, 32)}
    by_dow = {(m, w): bytearray(size) for m in range(1, 13) for w in range(7)}
    first = 0
    for year in range(SPAN_START.year, SPAN_END.year):
        for month in range(1, 13):
            weekday, length = calendar.monthrange(year, month)  # Monday = 0
            for d in range(length):
                i = first + d
                bit = 1 << (i & 7)
                by_dom[month, d + 1][i >> 3] |= bit
                by_dow[month, (weekday + d + 1) % 7][i >> 3] |= bit
            first += length
    return (
        {k: int.from_bytes(v, "little") for k, v in by_dom.items()},
        {k: int.from_bytes(v, "little") for k, v in by_dow.items()},
    )


@lru_cache(maxsize=4096)
def day_bits(expr: CronExpr) -> int:
    """Bit ``i`` set iff ``expr`` matches local day ``SPAN_START + i`` (as ``matches_day``)."""
    by_dom, by_dow = _calendar()
    dom = dow = 0
    for m in expr.months:
        for d in expr.days:
            dom |= by_dom.get((m, d), 0)
        for w in expr.weekdays:
            dow |= by_dow.get((m, w), 0)
    return dom | dow if expr.days_restricted and expr.weekdays_restricted else dom & dow


def _set_bits(bits: int) -> list[int]:
    text = bin(bits)[:1:-1]
    return [i for i, ch in enumerate(text) if ch == "1"]


def _lowest(bits: int) -> int:
    return (bits & -bits).bit_length() - 1


def _day(i: int) -> date:
    return date.fromordinal(_O0 + i)


def _index(ts: int, tz: ZoneInfo) -> int:
    return datetime.fromtimestamp(ts, tz).date().toordinal() - _O0


# -- DST transitions --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Zone:
    instants: tuple[int, ...]
    """Epoch seconds at which the UTC offset changes, inside the span."""
    days: tuple[int, ...]
    """Span day index of each transition, sorted."""


@lru_cache(maxsize=256)
def _zone(key: str) -> _Zone:
    tz = ZoneInfo(key)
    lo = int(datetime(SPAN_START.year, 1, 1, tzinfo=tz).timestamp())
    offset = datetime.fromtimestamp(lo, tz).utcoffset()
    instants = []
    for _ in range(
        _N // _SCAN_DAYS + 2
    ):  # a change and its reversal inside one step would be missed
        hi = lo + _SCAN_DAYS * DAY
        after = datetime.fromtimestamp(hi, tz).utcoffset()
        if after != offset:
            instants.append(_change(tz, lo, hi, after))
        lo, offset = hi, after
    return _Zone(tuple(instants), tuple(_index(t, tz) for t in instants))


_SCAN_DAYS = 7
"""Step of the transition scan: an offset holds for weeks (Morocco's shortest: ~30 days)."""


def _change(tz: ZoneInfo, lo: int, hi: int, after: object) -> int:
    """The first instant in (lo, hi] whose UTC offset is ``after``."""
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi


# -- exact fires ------------------------------------------------------------------------------


def next_fire(expr: CronExpr, tz: ZoneInfo, lo: int, hi: int) -> int | None:
    """The first fire in ``[lo, hi)``, exact (the evaluator's DST rules), or None.

    Walks real local days from ``lo`` (any year, inside or outside the span),
    skipping months the cron never fires in, and stops at the first fire:
    every valid cron fires at least once every eight years.
    """
    day = datetime.fromtimestamp(lo, tz).date() - timedelta(days=1)
    last = datetime.fromtimestamp(hi, tz).date() + timedelta(days=1)
    while day <= last:
        if day.month not in expr.months:
            day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
            continue
        if expr.matches_day(day):
            fires = expr.fires_on(tz, day.toordinal())
            k = bisect.bisect_left(fires, lo)
            if k < len(fires):
                return fires[k] if fires[k] < hi else None
        day += timedelta(days=1)
    return None


def _fires_from(expr: CronExpr, tz: ZoneInfo, lo: int, hi: int) -> list[int]:
    """Every fire in ``[lo, hi)`` (use on short ranges or sparse crons)."""
    out = []
    while (ts := next_fire(expr, tz, lo, hi)) is not None:
        out.append(ts)
        lo = ts + 1
    return out


# -- R-MODEL-3: the shortest gap between two fires ---------------------------------------------


@lru_cache(maxsize=4096)
def min_gap(expr: CronExpr, key: str) -> tuple[int, int] | None:
    """(seconds, fire that starts it): the shortest gap between consecutive fires, or None.

    Wall arithmetic for consecutive fires with no DST transition between or on
    their days; exact fires around each transition day.
    """
    tz = ZoneInfo(key)
    days = _set_bits(day_bits(expr))
    if not days:
        return None
    mods = expr.minutes_of_day
    tdays = _zone(key).days
    found: list[tuple[int, int]] = []
    if len(mods) > 1:
        gap, j = min((b - a, j) for j, (a, b) in enumerate(itertools.pairwise(mods)))
        plain = next((d for d in days if not _has(tdays, d, d)), None)
        if plain is not None:
            found.append((gap * 60, _wall(tz, plain, mods[j] * 60)))
    spread = mods[-1] - mods[0]
    best: tuple[int, int] | None = None
    for a, b in itertools.pairwise(days):
        if (best is None or b - a < best[0]) and not _has(tdays, a, b):
            best = (b - a, a)
    if best is not None:
        found.append((best[0] * DAY - spread * 60, _wall(tz, best[1], mods[-1] * 60)))
    for t in tdays:
        found.extend(_exact_gaps(expr, tz, days, t))
    return min(found) if found else None


def _has(tdays: tuple[int, ...], a: int, b: int) -> bool:
    """Is there a transition day in ``[a, b]``?"""
    k = bisect.bisect_left(tdays, a)
    return k < len(tdays) and tdays[k] <= b


def _exact_gaps(expr: CronExpr, tz: ZoneInfo, days: list[int], t: int) -> list[tuple[int, int]]:
    k = bisect.bisect_left(days, t)
    around = days[max(0, k - 1) : k + 2]
    fires = sorted({f for d in around for f in expr.fires_on(tz, _O0 + d)})
    return [(b - a, a) for a, b in itertools.pairwise(fires)]


def _wall(tz: ZoneInfo, i: int, second: int) -> int:
    """Epoch seconds of wall second ``second`` (may exceed a day) from day ``i``'s midnight."""
    day = _day(i + second // DAY)
    rest = second % DAY
    return resolve_wall(tz, day, rest // 3600, rest % 3600 // 60) + rest % 60


# -- R-MODEL-5: the first instant two recurring windows are both active ----------------------


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A recurring window as the checks see it: a cron and an elapsed duration in seconds."""

    expr: CronExpr
    duration: int


def first_overlap(a: Recurrence, b: Recurrence, key: str) -> int | None:
    """The first instant of the span at which an occurrence of ``a`` and one of ``b`` are active.

    Both windows' own occurrences must not overlap (R-MODEL-3 holds).
    """
    tz = ZoneInfo(key)
    shifts = a.duration // DAY + b.duration // DAY + 3
    occ_a = day_bits(a.expr).bit_count() * len(a.expr.minutes_of_day)
    occ_b = day_bits(b.expr).bit_count() * len(b.expr.minutes_of_day)
    if min(occ_a, occ_b) <= 4 * shifts:
        few, other = (a, b) if occ_a <= occ_b else (b, a)
        return _by_occurrences(few, other, tz)
    return _by_shifts(a, b, tz, key)


def _by_occurrences(few: Recurrence, other: Recurrence, tz: ZoneInfo) -> int | None:
    """Walk the occurrences of the sparser window; ask the other for a fire inside each."""
    for d in _set_bits(day_bits(few.expr)):
        for start in few.expr.fires_on(tz, _O0 + d):
            hit = _meets(other, tz, start, start + few.duration)
            if hit is not None:
                return hit
    return None


def _meets(r: Recurrence, tz: ZoneInfo, start: int, end: int) -> int | None:
    """First instant of ``[start, end)`` inside an occurrence of ``r``, exact."""
    fire = next_fire(r.expr, tz, start - r.duration + 1, end)
    return None if fire is None else max(fire, start)


def _meets_day(
    r: Recurrence, fires: tuple[int, ...], other: Recurrence, tz: ZoneInfo
) -> int | None:
    """First instant an occurrence of ``r`` at ``fires`` (one day's) meets ``other``, exact."""
    xs = [(f, f + r.duration) for f in fires]
    ys = [
        (f, f + other.duration)
        for f in other.expr.fire_epochs(tz, fires[0] - other.duration + 1, xs[-1][1])
    ]
    return first_common(xs, ys)


def _by_shifts(a: Recurrence, b: Recurrence, tz: ZoneInfo, key: str) -> int | None:
    near_a, exact_a = _near(a, key)
    near_b, exact_b = _near(b, key)
    bits_a = day_bits(a.expr) & ~near_a
    bits_b = day_bits(b.expr) & ~near_b
    found = [hit for day in exact_a if (hit := _meets_day(a, day, b, tz)) is not None]
    found += [hit for day in exact_b if (hit := _meets_day(b, day, a, tz)) is not None]
    for k in range(-(b.duration // DAY) - 1, a.duration // DAY + 2):
        offset = _pattern_overlap(a, b, k)
        if offset is None:
            continue
        both = bits_a & (bits_b >> k if k >= 0 else bits_b << -k)
        if both:
            found.append(_wall(tz, _lowest(both), offset))
    return min(found) if found else None


@lru_cache(maxsize=4096)
def _near(r: Recurrence, key: str) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """Days with an occurrence containing a DST transition (bitset), and the fires of each."""
    tz = ZoneInfo(key)
    days: set[int] = set()
    for t in _zone(key).instants:
        days.update(_index(f, tz) for f in _fires_from(r.expr, tz, t - r.duration + 1, t + 1))
    fires = tuple(f for d in sorted(days) if (f := r.expr.fires_on(tz, _O0 + d)))
    bits = 0
    for d in days:
        if 0 <= d < _N:
            bits |= 1 << d
    return bits, fires


def _pattern_overlap(a: Recurrence, b: Recurrence, k: int) -> int | None:
    """Away from DST: first wall second (from a's day) where a's day and b's day ``+k`` overlap."""
    xs = [(m * 60, m * 60 + a.duration) for m in a.expr.minutes_of_day]
    base = k * DAY
    ys = [(base + m * 60, base + m * 60 + b.duration) for m in b.expr.minutes_of_day]
    return first_common(xs, ys)


def first_common(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> int | None:
    """First instant in both unions of sorted, internally disjoint half-open intervals."""
    i = j = 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if lo < hi:
            return lo
        if xs[i][1] <= ys[j][1]:
            i += 1
        else:
            j += 1
    return None


def one_shot_meets(r: Recurrence, key: str, start: int, end: int) -> int | None:
    """First instant of the one-shot ``[start, end)`` inside an occurrence of ``r`` (whole span)."""
    return _meets(r, ZoneInfo(key), start, end)
