"""The evaluator's public API beyond the seed: current_interval, edges, inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gps_dagster.domain.evaluator import (
    SENTINEL_START,
    Intent,
    boundaries,
    current_interval,
    effective_intent,
    intervals,
    next_boundary,
    window_edges,
)
from gps_dagster.domain.spec import DesiredState

from .helpers import at, one_shot, recurring, schedule

HCM = "Asia/Ho_Chi_Minh"


def test_current_interval_has_its_true_start_far_back() -> None:
    # Weekly window: on Thursday the stopped interval began on Monday 18:00 (3 days back, past the
    # 1-day chunk).
    s = schedule([recurring("monday", "0 8 * * 1", "10h")], tz=HCM)
    row = current_interval(s, "a", at(HCM, 2026, 10, 22, 12))
    assert (row.start, row.end) == (at(HCM, 2026, 10, 19, 18), at(HCM, 2026, 10, 26, 8))
    assert row.intent.source == "default"
    # the identity is the same from pass to pass
    assert current_interval(s, "a", at(HCM, 2026, 10, 25, 23, 59)).start == row.start


def test_current_interval_inside_a_window_reports_the_occurrence() -> None:
    s = schedule([recurring("monday", "0 8 * * 1", "10h")], tz=HCM)
    row = current_interval(s, "a", at(HCM, 2026, 10, 19, 9, 30, 15))
    assert (row.start, row.end, row.intent.source) == (
        at(HCM, 2026, 10, 19, 8),
        at(HCM, 2026, 10, 19, 18),
        "monday",
    )
    assert row.intent.occurrence_start == at(HCM, 2026, 10, 19, 8)


def test_current_interval_finds_a_one_shot_edge_years_back() -> None:
    s = schedule(
        [
            one_shot(
                "migration", "2023-01-01T00:00:00+07:00", "2023-02-01T00:00:00+07:00", a="running"
            )
        ],
        tz=HCM,
    )
    row = current_interval(s, "a", at(HCM, 2026, 10, 19))
    assert row.start == at(HCM, 2023, 2, 1) and row.end is None
    assert row.intent.desired_state is DesiredState.STOPPED


def test_current_interval_without_any_change_uses_the_sentinel() -> None:
    s = schedule([], tz=HCM)
    first = current_interval(s, "a", at(HCM, 2026, 10, 19))
    later = current_interval(s, "a", at(HCM, 2027, 3, 1))
    assert first.start is SENTINEL_START and later.start == first.start
    assert first.end is None and first.intent.source == "default"


def test_current_interval_ends_at_a_change_beyond_the_first_chunks() -> None:
    s = schedule(
        [one_shot("later", "2027-01-10T00:00:00+07:00", "2027-01-11T00:00:00+07:00")],
        tz=HCM,
        targets=[{"model_deploy_id": "a", "default_state": "running"}],
    )
    row = current_interval(s, "a", at(HCM, 2026, 10, 19))
    assert row.end == at(HCM, 2027, 1, 10)
    assert next_boundary(s, at(HCM, 2026, 10, 19)) == at(HCM, 2027, 1, 10)
    assert next_boundary(s, at(HCM, 2027, 1, 11)) is None


def test_window_edges_include_edges_where_intent_does_not_change() -> None:
    # two abutting windows wanting the same thing: one interval, four edges
    s = schedule(
        [recurring("early", "0 6 * * *", "2h"), recurring("late", "0 8 * * *", "2h", priority=20)],
        tz=HCM,
    )
    day = (at(HCM, 2026, 10, 19), at(HCM, 2026, 10, 20))
    rows = intervals(s, *day)["a"]
    assert [(r.start.hour, r.end.hour if r.end else None, r.intent.source) for r in rows] == [
        (0, 6, "default"),
        (6, 10, "early"),
        (10, 0, "default"),
    ]
    assert [(e.hour, n, k) for e, n, k in window_edges(s, *day)] == [
        (6, "early", "start"),
        (8, "early", "end"),
        (8, "late", "start"),
        (10, "late", "end"),
    ]
    assert [(b.at.hour, b.target) for b in boundaries(s, *day)] == [(6, "a"), (10, "a")]


def test_boundaries_include_a_change_exactly_at_the_range_start() -> None:
    s = schedule([recurring("w", "0 8 * * *", "1h")], tz=HCM)
    found = boundaries(s, at(HCM, 2026, 10, 19, 8), at(HCM, 2026, 10, 19, 9))
    assert [(b.at.hour, b.target) for b in found] == [(8, "a")]
    assert isinstance(found[0].before, Intent) and found[0].before.source == "default"


def test_targets_filter_and_unknown_target() -> None:
    s = schedule([recurring("w", "0 8 * * *", "1h", b="stopped")], tz=HCM)
    assert list(intervals(s, at(HCM, 2026, 10, 19), at(HCM, 2026, 10, 20), targets=["b"])) == ["b"]
    with pytest.raises(KeyError):
        effective_intent(s, "nobody", at(HCM, 2026, 10, 19))


def test_window_replicas_and_intent_key() -> None:
    s = schedule([recurring("w", "0 8 * * *", "1h", replicas=2)], tz=HCM)
    intent = effective_intent(s, "a", at(HCM, 2026, 10, 19, 8, 30))
    assert intent.key == (DesiredState.RUNNING, 2, False) and intent.replicas == 2


NAIVE = datetime(2026, 10, 19, 8)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: effective_intent(s, "a", NAIVE),
        lambda s: intervals(s, NAIVE, NAIVE + timedelta(days=1)),
        lambda s: current_interval(s, "a", NAIVE),
        lambda s: boundaries(s, NAIVE, NAIVE + timedelta(days=1)),
        lambda s: next_boundary(s, NAIVE),
        lambda s: window_edges(s, NAIVE, NAIVE + timedelta(days=1)),
    ],
)
def test_naive_datetimes_are_refused(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="naive"):
        call(schedule([recurring("w", "0 8 * * *", "1h")]))


def test_results_are_in_the_schedule_zone_whatever_the_input_zone() -> None:
    s = schedule([recurring("w", "0 8 * * *", "1h")], tz=HCM)
    rows = intervals(
        s, datetime(2026, 10, 18, 17, tzinfo=UTC), datetime(2026, 10, 19, 17, tzinfo=UTC)
    )["a"]
    assert [r.start.isoformat() for r in rows] == [
        "2026-10-19T00:00:00+07:00",
        "2026-10-19T08:00:00+07:00",
        "2026-10-19T09:00:00+07:00",
    ]


def test_empty_range_is_refused() -> None:
    s = schedule([])
    with pytest.raises(ValueError, match="after"):
        intervals(s, at("UTC", 2026, 1, 2), at("UTC", 2026, 1, 1))
