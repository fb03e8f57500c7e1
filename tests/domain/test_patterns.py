"""The fixed-span checks (``domain.patterns``) against plain enumeration of every fire.

The reference enumerates every fire of the span with the evaluator's own
``fire_epochs`` and merges occurrence lists: slow, obviously right. The
bitset/wall-time shortcuts must give the same shortest gap (and where it
starts) and find a real overlap no later than the first one enumerated, in
zones with and without DST (including a 30-minute DST shift).
"""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gps_dagster.domain import patterns
from gps_dagster.domain.crons import parse_cron
from gps_dagster.domain.patterns import (
    SPAN_END,
    SPAN_START,
    Recurrence,
    first_common,
    first_overlap,
    min_gap,
)

ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Ho_Chi_Minh", "UTC"]


def _span(tz: ZoneInfo) -> tuple[int, int]:
    start = datetime(SPAN_START.year, 1, 1, tzinfo=tz)
    end = datetime(SPAN_END.year, 1, 1, tzinfo=tz)
    return int(start.timestamp()), int(end.timestamp())


def reference_gap(cron: str, zone: str) -> tuple[int, int] | None:
    tz = ZoneInfo(zone)
    fires = parse_cron(cron).fire_epochs(tz, *_span(tz))
    return min(((b - a, a) for a, b in itertools.pairwise(fires)), default=None)


def occurrences(r: Recurrence, zone: str) -> list[tuple[int, int]]:
    tz = ZoneInfo(zone)
    return [(f, f + r.duration) for f in r.expr.fire_epochs(tz, *_span(tz))]


def active(occs: list[tuple[int, int]], at: int) -> bool:
    return any(a <= at < b for a, b in occs)


def _parses(cron: str) -> bool:
    try:
        parse_cron(cron)
    except ValueError:  # "0 1 31 2 *" never fires
        return False
    return True


sparse_crons = st.builds(
    lambda m, h, dom, mon, dow: f"{m} {h} {dom} {mon} {dow}",
    st.sampled_from(["0", "30", "0,30"]),
    st.sampled_from(["1", "2", "3", "1,2", "8", "22", "0", "1-3"]),  # 1-3 h: DST hours
    st.sampled_from(["*", "*", "1", "29", "31", "1,15", "25-31"]),
    st.sampled_from(["*", "*", "2", "3,10", "11", "1-6"]),
    st.sampled_from(["*", "*", "0", "1-5", "SAT,SUN"]),
).filter(_parses)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sparse_crons, st.sampled_from(ZONES))
def test_min_gap_is_the_shortest_gap_between_enumerated_fires(cron: str, zone: str) -> None:
    assert min_gap(parse_cron(cron), zone) == reference_gap(cron, zone)


def _within_gap(cron: str, zone: str, duration: int, fraction: float) -> Recurrence:
    """A window on ``cron`` whose own occurrences never overlap (R-MODEL-3 holds)."""
    expr = parse_cron(cron)
    gap = min_gap(expr, zone)
    assert gap is not None
    return Recurrence(expr, max(60, min(duration, int(gap[0] * fraction) // 60 * 60)))


durations = st.sampled_from([60, 1800, 3600, 5400, 7200, 36000, 86400, 3 * 86400, 20 * 86400])
fractions = st.sampled_from([0.1, 0.5, 0.9, 1.0])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sparse_crons, sparse_crons, st.sampled_from(ZONES), durations, durations, fractions, fractions
)
def test_first_overlap_agrees_with_enumerated_occurrences(
    cron_a: str, cron_b: str, zone: str, da: int, db: int, fa: float, fb: float
) -> None:
    a, b = _within_gap(cron_a, zone, da, fa), _within_gap(cron_b, zone, db, fb)
    xs, ys = occurrences(a, zone), occurrences(b, zone)
    expected = first_common(xs, ys)
    found = first_overlap(a, b, zone)
    assert (found is None) == (expected is None)
    if found is not None and expected is not None:
        assert found <= expected
        assert active(xs, found) or active(occurrences_around(a, zone, found), found)
        assert active(ys, found) or active(occurrences_around(b, zone, found), found)


@pytest.mark.parametrize("strategy", ["shifts", "occurrences"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sparse_crons, sparse_crons, st.sampled_from(ZONES), durations, durations, fractions, fractions
)
def test_both_strategies_agree_with_enumeration(
    strategy: str, cron_a: str, cron_b: str, zone: str, da: int, db: int, fa: float, fb: float
) -> None:
    """``first_overlap`` picks one by cost; each must be right on its own."""
    a, b = _within_gap(cron_a, zone, da, fa), _within_gap(cron_b, zone, db, fb)
    expected = first_common(occurrences(a, zone), occurrences(b, zone))
    if strategy == "shifts":
        found = patterns._by_shifts(a, b, ZoneInfo(zone), zone)
    else:
        found = patterns._by_occurrences(a, b, ZoneInfo(zone))
    assert (found is None) == (expected is None)
    assert found is None or expected is None or found <= expected


def occurrences_around(r: Recurrence, zone: str, at: int) -> list[tuple[int, int]]:
    """Occurrences that started before the span (the shortcut may meet one at its very start)."""
    tz = ZoneInfo(zone)
    return [(f, f + r.duration) for f in r.expr.fire_epochs(tz, at - r.duration, at + 1)]


def test_a_dense_cron_costs_shifts_not_fires() -> None:
    """``* * * * *`` fires 17 million times in the span: the answer comes from day patterns."""
    every_minute = Recurrence(parse_cron("* * * * *"), 60)
    on_the_half = Recurrence(parse_cron("30 * * * *"), 60)
    gap = min_gap(every_minute.expr, "America/New_York")
    assert gap is not None and gap[0] == 60
    assert first_overlap(every_minute, on_the_half, "America/New_York") == int(
        datetime(2026, 1, 1, 0, 30, tzinfo=ZoneInfo("America/New_York")).timestamp()
    )


NY = "America/New_York"


def _ny(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=ZoneInfo(NY)).timestamp())  # type: ignore[misc]


def test_spring_forward_makes_an_overlap_wall_clocks_do_not_show() -> None:
    """01:00 + 2 h elapsed ends at 04:00 on 8 March 2026 (02:00 is skipped): it meets 03:30."""
    night = Recurrence(parse_cron("0 1 * * *"), 2 * 3600)
    late = Recurrence(parse_cron("30 3 * * *"), 1800)
    assert first_overlap(night, late, NY) == _ny(2026, 3, 8, 3, 30)
    assert first_overlap(night, late, "UTC") is None


def test_fall_back_hides_an_overlap_wall_clocks_show() -> None:
    """01:30 EDT + 1 h elapsed ends at 01:30 EST on 1 November 2026: 02:15 is not reached.

    The next 1 November that is no transition day (2027) is the first real overlap.
    """
    nov1 = Recurrence(parse_cron("30 1 1 11 *"), 3600)
    daily = Recurrence(parse_cron("15 2 * * *"), 600)
    assert first_overlap(nov1, daily, NY) == _ny(2027, 11, 1, 2, 15)
    assert first_overlap(nov1, daily, "UTC") == int(
        datetime(2026, 11, 1, 2, 15, tzinfo=ZoneInfo("UTC")).timestamp()
    )
