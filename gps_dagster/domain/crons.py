"""Standard 5-field cron, evaluated in an IANA time zone with vixie-cron DST rules.

Why our own parser rather than croniter: the domain must be pure and fast, and
R-EVAL-2 fixes DST behaviour that libraries disagree on (Dagster fires a
repeated wall time at its *second* occurrence; we fire at the first, and a fire
inside a spring-forward gap happens at the first valid instant after the gap).

Fires are computed per local calendar day from precomputed sets (matching
months, days, minutes of the day), never minute by minute, and memoised per
(expression, zone, day) as integer epoch seconds.
"""

# Decisions embodied here (docs/decisions.md):
# * “Returned datetimes carry a fixed offset”
# * “Identifier patterns end with `\Z`, not `$`”

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from gps_dagster.domain.documents import FieldErrorCarrier

__all__ = ["CronExpr", "local_time", "parse_cron"]

_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_MONTHS = {n.lower(): i for i, n in enumerate(calendar.month_abbr) if n}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_FIX = (
    "use 5 fields 'minute hour day-of-month month day-of-week', e.g. '0 8 * * 1-5', or a macro "
    "such as @daily"
)
_NUMBER = re.compile(r"^[0-9]{1,4}\Z")
_YEARS = re.compile(
    r"^[0-9]{4}(?:-[0-9]{4})?(?:/[0-9]+)?(?:,[0-9]{4}(?:-[0-9]{4})?(?:/[0-9]+)?)*\Z"
)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MAX_DAY = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


def _bad(detail: str) -> FieldErrorCarrier:
    return FieldErrorCarrier("invalid_cron", f"{detail}; {_FIX}")


def _value(token: str, lo: int, hi: int, names: dict[str, int], what: str) -> int:
    low = token.lower()
    if low in names:
        return names[low]
    if not _NUMBER.match(token):  # ASCII only: str.isdigit() also takes '²' and '８'
        raise _bad(f"'{token[:20]}' is not a valid {what}")
    number = int(token)
    if not lo <= number <= hi:
        raise _bad(f"{what} {number} is out of range {lo}-{hi}")
    return number


def _field(text: str, lo: int, hi: int, names: dict[str, int], what: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise _bad(f"empty list item in {what} '{text}'")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text or part.endswith("/"):
            if not _NUMBER.match(step_text) or int(step_text) < 1:
                raise _bad(f"step '{step_text[:20]}' in {what} must be a whole number >= 1")
            step = int(step_text)
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, lo, hi, names, what), _value(b, lo, hi, names, what)
            if first > last:
                raise _bad(f"range {base} in {what} runs backwards")
        else:
            first = _value(base, lo, hi, names, what)
            last = hi if step_text else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


@dataclass(frozen=True, eq=False)
class CronExpr:
    """A parsed 5-field cron expression (sets of matching values per field)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """Cron numbering: Sunday = 0 (7 is folded into 0)."""
    days_restricted: bool
    weekdays_restricted: bool
    minutes_of_day: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        mods = tuple(sorted(h * 60 + m for h in self.hours for m in self.minutes))
        object.__setattr__(self, "minutes_of_day", mods)

    def matches_day(self, day: date) -> bool:
        """Classic rule: with both day fields restricted, either may match."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom or dow
        return dom and dow

    def fires(self, tz: ZoneInfo, start: datetime, end: datetime) -> Iterator[datetime]:
        """Aware fire instants in ``[start, end)``, increasing, in ``tz`` (R-EVAL-2 DST rules)."""
        _aware(start, end)
        for ts in self.fire_epochs(tz, math.ceil(start.timestamp()), math.ceil(end.timestamp())):
            yield local_time(ts, tz)

    def fires_on(self, tz: ZoneInfo, ordinal: int) -> tuple[int, ...]:
        """Fire instants (epoch seconds, increasing) of local day ``date.fromordinal(ordinal)``."""
        return _day_fires(self, tz, ordinal)

    def fire_epochs(self, tz: ZoneInfo, start: int, end: int) -> list[int]:
        """Fire instants as epoch seconds in ``[start, end)`` — the evaluator's fast path."""
        first = datetime.fromtimestamp(start, tz).date().toordinal() - 1
        last = datetime.fromtimestamp(end, tz).date().toordinal() + 1
        out: list[int] = []
        prev = start - 1
        for ordinal in range(first, last + 1):
            for ts in _day_fires(self, tz, ordinal):
                if ts > prev and ts < end:
                    out.append(ts)
                    prev = ts
        return out


_FIXED: dict[tuple[timedelta, str], timezone] = {}


def local_time(value: int | datetime, tz: ZoneInfo) -> datetime:
    """An instant as local time of ``tz``, carried by a *fixed-offset* tzinfo (e.g. ``-04:00 EDT``).

    Why not the ``ZoneInfo`` itself: Python compares datetimes that share a
    tzinfo by wall time (01:30 EDT == 01:30 EST in the repeated hour), and
    never finds a fold instant equal to the same instant in another zone
    (PEP 495). Instants returned by the domain must compare exactly, so they
    carry the offset in force; the wall time and ISO text are the zone's own.
    """
    local = datetime.fromtimestamp(value, tz) if isinstance(value, int) else value.astimezone(tz)
    offset = local.utcoffset() or timedelta(0)
    name = local.tzname() or ""
    fixed = _FIXED.get((offset, name))
    if fixed is None:
        fixed = _FIXED[(offset, name)] = timezone(offset, name)
    return local.replace(tzinfo=fixed, fold=0)


_DAY_CACHE: dict[tuple[int, str, int], tuple[int, ...]] = {}
_CACHE_LIMIT = 400_000


def _day_fires(expr: CronExpr, tz: ZoneInfo, ordinal: int) -> tuple[int, ...]:
    key = (id(expr), tz.key, ordinal)
    hit = _DAY_CACHE.get(key)
    if hit is not None:  # _KEEP holds every cached expr alive, so its id cannot be reused
        return hit
    day = date.fromordinal(ordinal)
    result = _compute_day(expr, tz, day) if expr.matches_day(day) else ()
    if len(_DAY_CACHE) > _CACHE_LIMIT:
        _DAY_CACHE.clear()
        _KEEP.clear()
    _KEEP[id(expr)] = expr  # keeps expr alive so its id is never reused while cached
    _DAY_CACHE[key] = result
    return result


_KEEP: dict[int, CronExpr] = {}


def _compute_day(expr: CronExpr, tz: ZoneInfo, day: date) -> tuple[int, ...]:
    wall0 = (day.toordinal() - _EPOCH_ORDINAL) * 86400
    start = datetime(day.year, day.month, day.day, tzinfo=tz)
    nxt = start + timedelta(days=1)
    off0 = start.utcoffset()
    if off0 is not None and off0 == nxt.utcoffset():
        base = wall0 - int(off0.total_seconds())
        return tuple(base + mod * 60 for mod in expr.minutes_of_day)
    out: list[int] = []
    for mod in expr.minutes_of_day:
        ts = resolve_wall(tz, day, mod // 60, mod % 60)
        if not out or ts > out[-1]:
            out.append(ts)
    return tuple(out)


def resolve_wall(tz: ZoneInfo, day: date, hour: int, minute: int) -> int:
    """Epoch seconds of a local wall time: first occurrence if repeated, gap end if skipped."""
    wall = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
    ts = int(wall.timestamp())  # fold=0: first occurrence; in a gap, the pre-gap offset
    back = datetime.fromtimestamp(ts, tz)
    if back.replace(tzinfo=None) == wall.replace(tzinfo=None):
        return ts
    lo = int(wall.replace(fold=1).timestamp())  # before the transition
    after = back.utcoffset()
    while lo + 1 < ts:  # smallest instant with the post-transition offset
        mid = (lo + ts) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            ts = mid
        else:
            lo = mid
    return ts


def _never_fires(days: frozenset[int], months: frozenset[int]) -> bool:
    return not any(d <= _MAX_DAY[m] for m in months for d in days)


def _six_fields(parts: list[str]) -> FieldErrorCarrier:
    """Six fields: a Quartz-style leading seconds field, or a trailing year (``... 1-5 2026``)."""
    if _YEARS.match(parts[5]):
        return FieldErrorCarrier(
            "cron_six_fields",
            f"the sixth field '{parts[5][:40]}' looks like a year, and years are not supported; "
            "drop the last (year) field and use 5 fields, e.g. '0 8 * * 1-5', or a one_shot "
            "window for dates",
        )
    return FieldErrorCarrier(
        "cron_six_fields",
        "seconds are not supported; drop the first (seconds) field and use 5 fields, "
        "e.g. '0 8 * * 1-5'",
    )


def _aware(*values: datetime) -> None:
    for value in values:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime")


def parse_cron(text: str) -> CronExpr:
    """Parse a standard 5-field cron or a macro; raise ``FieldErrorCarrier`` on anything else.

    Results are memoised by text, so every window with the same cron shares one
    ``CronExpr`` (and its per-day fire cache).
    """
    if not isinstance(text, str) or not text.strip():
        raise _bad("empty cron expression")
    return _parse(text)


@lru_cache(maxsize=4096)
def _parse(text: str) -> CronExpr:
    raw = text.strip()
    if raw.startswith("@"):
        if raw.lower() not in _MACROS:
            raise _bad(f"unknown macro '{raw[:40]}' (known: {', '.join(sorted(_MACROS))})")
        raw = _MACROS[raw.lower()]
    parts = raw.split()
    if len(parts) == 6:
        raise _six_fields(parts)
    if len(parts) != 5:
        raise _bad(f"'{text[:80]}' has {len(parts)} fields")
    sets = [
        _field(p, lo, hi, names, what)
        for p, (what, lo, hi, names) in zip(parts, _FIELDS, strict=True)
    ]
    weekdays = frozenset(d % 7 for d in sets[4])
    days_restricted = not parts[2].startswith("*")
    weekdays_restricted = not parts[4].startswith("*")
    if not weekdays_restricted and _never_fires(sets[2], sets[3]):
        raise _bad(f"'{text}' never fires (no such day in the chosen months)")
    return CronExpr(
        text=text,
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=weekdays,
        days_restricted=days_restricted,
        weekdays_restricted=weekdays_restricted,
    )
