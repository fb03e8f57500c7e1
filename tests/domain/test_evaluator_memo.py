"""The evaluator serves later instants from what a search already swept, and answers exactly
what a fresh search answers.

``current_interval`` and ``next_boundary`` remember the change points of the span their last
search swept (decision “The evaluator answers from the span its last search swept”). These
tests walk instants forwards, backwards and onto change points, and compare every answer with
a fresh search (the memory cleared before each call). The schedules cover the cases where the
memory must refuse: an instant whose interval started beyond the search horizon of a dense
schedule (the fresh search answers the sentinel there), instants before the remembered span,
instants exactly at a change.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gps_dagster.domain import evaluator
from gps_dagster.domain.evaluator import (
    SENTINEL_START,
    current_interval,
    horizon_days,
    next_boundary,
)
from gps_dagster.domain.occurrences import compile_schedule
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from tests.domain.test_density import doc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = datetime(2026, 10, 1, tzinfo=UTC)


def _forget() -> None:
    evaluator._KNOWN_INTERVALS.clear()
    evaluator._KNOWN_CHANGES.clear()


def _fresh_interval(s: Schedule, target: str, at: datetime) -> evaluator.IntentInterval:
    evaluator._KNOWN_INTERVALS.pop((id(compile_schedule(s)), target), None)  # this target's only
    return current_interval(s, target, at)


def _fresh_boundary(s: Schedule, at: datetime) -> datetime | None:
    evaluator._KNOWN_CHANGES.clear()
    return next_boundary(s, at)


def _example(name: str) -> Schedule:
    return load_schedule(json.loads((EXAMPLES / name).read_text()))


def _instants(s: Schedule, span: timedelta, step: timedelta) -> list[datetime]:
    """A forward walk, every change point and the second before it, then random jumps."""
    walk = [T0 + step * k for k in range(int(span / step))]
    edges: list[datetime] = []
    at: datetime | None = T0
    while at is not None and at < T0 + span and len(edges) < 160:
        edges += [at - timedelta(seconds=1), at]
        at = _fresh_boundary(s, at)
    rng = random.Random(7)
    jumps = [T0 + timedelta(seconds=rng.randrange(int(span.total_seconds()))) for _ in range(60)]
    return walk + sorted(edges) + jumps


def _compare(s: Schedule, instants: list[datetime]) -> list[evaluator.IntentInterval]:
    """Every memoised answer equals the fresh one; returns the fresh intervals."""
    _forget()
    fresh_all = []
    for at in instants:
        for target in s.target_ids:
            served = current_interval(s, target, at)
            fresh = _fresh_interval(s, target, at)  # leaves what it swept for the next instant
            assert served == fresh, (at, target)
            fresh_all.append(fresh)
        assert next_boundary(s, at) == _fresh_boundary(s, at), at
    return fresh_all


@pytest.mark.parametrize(
    ("name", "days"),
    [
        ("demo-schedule.json", 2),
        ("seed-schedule.json", 9),
        ("holiday-schedule.json", 9),
        ("scenario2-schedule.json", 9),
        ("gpu42-schedule.json", 9),
    ],
)
def test_the_examples_are_answered_as_a_fresh_search_answers(name: str, days: int) -> None:
    s = _example(name)
    _compare(s, _instants(s, timedelta(days=days), timedelta(minutes=23)))


def test_an_interval_that_started_beyond_a_dense_schedules_horizon_is_not_served() -> None:
    """Fires every 2 minutes on the 1st and 10th only: the 8-day gap is longer than the horizon
    (6 days), so late in the gap a fresh search no longer finds the start and answers the
    sentinel; a memory that ignored the horizon would answer the start found earlier."""
    s = load_schedule(doc([("*/2 * 1,10 * *", "1m")], tz="UTC"))
    assert horizon_days(s) < 8
    found = _compare(s, _instants(s, timedelta(days=40), timedelta(hours=3)))
    assert any(iv.start == SENTINEL_START for iv in found)
    assert any(iv.start != SENTINEL_START and iv.end is not None for iv in found)


def test_a_pass_every_few_seconds_is_served_without_sweeping_again() -> None:
    """The demo's two-minute windows: a day of passes every 5 s sweeps about once a day, not
    at every change."""
    s = _example("demo-schedule.json")
    _forget()
    calls = 0
    real = evaluator.segments

    def counted(*args: object, **kw: object) -> object:
        nonlocal calls
        calls += 1
        return real(*args, **kw)  # type: ignore[arg-type]

    evaluator.segments = counted  # type: ignore[assignment]
    try:
        for k in range(17_280):  # a day at 5 s
            at = T0 + timedelta(seconds=5 * k)
            for target in s.target_ids:
                current_interval(s, target, at)
            next_boundary(s, at)
    finally:
        evaluator.segments = real
    assert calls <= 12, calls  # a sweep per target and chunk a day, not one per change (720)
