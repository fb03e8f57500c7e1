"""Properties of the evaluator on random schedules (hypothesis), including DST zones.

Schedules are built with field validation only (``Schedule.model_validate``):
the properties hold for any field-valid schedule, even ones the cross-field
checks would refuse, so no example is thrown away.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gps_dagster.domain.evaluator import boundaries, current_interval, effective_intent, intervals
from gps_dagster.domain.spec import Schedule

from .oracle import oracle_intervals

# zones with ranges starting the day before their 2026 DST changes (and two zones without DST)
ZONE_ANCHORS = [
    ("America/New_York", datetime(2026, 3, 7, 5, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 10, 31, 4, tzinfo=UTC)),
    ("Europe/London", datetime(2026, 3, 28, tzinfo=UTC)),
    ("Europe/London", datetime(2026, 10, 24, tzinfo=UTC)),
    ("UTC", datetime(2026, 10, 19, tzinfo=UTC)),
    ("Asia/Ho_Chi_Minh", datetime(2026, 10, 18, 17, tzinfo=UTC)),
]
TARGETS = ["a", "b", "c"]

crons = st.builds(
    lambda m, h, dom, dow: f"{m} {h} {dom} * {dow}",
    st.sampled_from(["0", "30", "15", "*/30", "0,45", "59"]),
    st.sampled_from(
        ["*", "1", "2", "1", "2", "8", "22", "1-3", "*/6", "0,12", "23"]
    ),  # 1 and 2: DST hours
    st.sampled_from(["*", "*", "1", "25-31"]),
    st.sampled_from(["*", "*", "1-5", "0", "6", "SAT,SUN", "MON"]),
)
states = st.lists(
    st.fixed_dictionaries(
        {
            "model_deploy_id": st.sampled_from(TARGETS),
            "desired_state": st.sampled_from(["running", "stopped"]),
        },
        optional={"replicas": st.integers(1, 3), "allow_downtime": st.booleans()},
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda s: s["model_deploy_id"],
)


@st.composite
def windows(draw: st.DrawFn, index: int, anchor: datetime) -> dict[str, Any]:
    base = {"name": f"w{index}", "priority": draw(st.integers(0, 3)), "states": draw(states)}
    if draw(st.booleans()):
        minutes = draw(st.integers(1, 30 * 60))
        return {**base, "kind": "recurring", "cron": draw(crons), "duration": f"{minutes}m"}
    start = anchor + timedelta(minutes=draw(st.integers(-1440, 4 * 1440)))
    until = start + timedelta(minutes=draw(st.integers(1, 2 * 1440)))
    return {
        **base,
        "kind": "one_shot",
        "active_from": start.isoformat(),
        "active_until": until.isoformat(),
    }


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schedule, datetime, datetime]:
    zone, anchor = draw(st.sampled_from(ZONE_ANCHORS))
    n = draw(st.integers(0, 4))
    doc = {
        "name": "prop",
        "timezone": zone,
        "targets": [
            {
                "model_deploy_id": t,
                "default_state": draw(st.sampled_from(["running", "stopped"])),
                "default_allow_downtime": draw(st.booleans()),
            }
            for t in TARGETS
        ],
        "windows": [draw(windows(i, anchor)) for i in range(n)],
    }
    start = anchor + timedelta(minutes=draw(st.integers(0, 1440)))
    end = start + timedelta(minutes=draw(st.integers(1, 3 * 1440)))
    return Schedule.model_validate(doc), start, end


@settings(max_examples=300, deadline=None)
@given(cases())
def test_intervals_partition_the_range_and_adjacent_intervals_differ(
    case: tuple[Schedule, datetime, datetime],
) -> None:
    s, start, end = case
    for rows in intervals(s, start, end).values():
        assert rows[0].start == start and rows[-1].end == end
        for r in rows:
            assert r.end is not None and r.start < r.end
        for prev, nxt in itertools.pairwise(rows):
            assert prev.end == nxt.start  # no gap, no overlap
            assert prev.intent.key != nxt.intent.key  # maximal


@settings(max_examples=150, deadline=None)
@given(cases(), st.floats(0, 1))
def test_intent_at_any_instant_equals_its_intervals(
    case: tuple[Schedule, datetime, datetime], where: float
) -> None:
    s, start, end = case
    when = start + timedelta(seconds=int((end - start).total_seconds() * where))
    if when >= end:
        return
    for target, rows in intervals(s, start, end).items():
        row = next(r for r in rows if r.start <= when and r.end is not None and when < r.end)
        assert effective_intent(s, target, when).key == row.intent.key
        cur = current_interval(s, target, when)
        assert cur.intent.key == row.intent.key
        if row.start == start:  # the interval may have begun before the range
            assert cur.start <= row.start
        else:
            assert cur.start == row.start


@settings(max_examples=150, deadline=None)
@given(cases())
def test_boundaries_are_the_interval_starts(case: tuple[Schedule, datetime, datetime]) -> None:
    s, start, end = case
    rows = intervals(s, start, end)
    want = sorted((r.start, t) for t, rs in rows.items() for r in rs[1:])
    got = [(b.at, b.target) for b in boundaries(s, start, end)]
    assert [g for g in got if g[0] > start] == want
    assert all(b.before.key != b.after.key for b in boundaries(s, start, end))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_evaluator_agrees_with_the_minute_oracle(case: tuple[Schedule, datetime, datetime]) -> None:
    assert_agrees_with_oracle(*case)


def assert_agrees_with_oracle(s: Schedule, start: datetime, end: datetime) -> None:
    got = {
        t: [
            (
                int(r.start.timestamp()),
                int(r.end.timestamp()) if r.end else None,
                r.intent.key,
                r.intent.source,
            )
            for r in rows
        ]
        for t, rows in intervals(s, start, end).items()
    }
    assert got == oracle_intervals(s, int(start.timestamp()), int(end.timestamp()))


DST_ANCHORS = [z for z in ZONE_ANCHORS if z[0] in ("America/New_York", "Europe/London")]
dst_crons = st.builds(
    lambda m, h: f"{m} {h} * * *",
    st.sampled_from(["0", "30", "*/20", "59", "0,15"]),
    st.sampled_from(["1", "2", "1-3", "0-2", "*"]),
)


@st.composite
def dst_cases(draw: st.DrawFn) -> tuple[Schedule, datetime, datetime]:
    """Recurring windows firing in the gap or the repeated hour of a DST change."""
    zone, anchor = draw(st.sampled_from(DST_ANCHORS))
    wins = [
        {
            "name": f"w{i}",
            "priority": i,
            "kind": "recurring",
            "cron": draw(dst_crons),
            "duration": f"{draw(st.integers(1, 240))}m",
            "states": draw(states),
        }
        for i in range(draw(st.integers(1, 3)))
    ]
    doc = {
        "name": "dst",
        "timezone": zone,
        "windows": wins,
        "targets": [{"model_deploy_id": t, "default_state": "stopped"} for t in TARGETS],
    }
    return Schedule.model_validate(doc), anchor, anchor + timedelta(days=3)


@settings(max_examples=60, deadline=None)
@given(dst_cases())
def test_evaluator_agrees_with_the_minute_oracle_around_dst_changes(
    case: tuple[Schedule, datetime, datetime],
) -> None:
    assert_agrees_with_oracle(*case)


# Holiday calendars (R-NEXT-2): anchors just before holidays of 2026 in each zone's country.
CALENDAR_ANCHORS = [
    ("Asia/Ho_Chi_Minh", "VN", None, datetime(2026, 8, 29, 17, tzinfo=UTC)),  # 31 Aug-2 Sep
    ("America/New_York", "US", "NY", datetime(2026, 11, 24, 5, tzinfo=UTC)),  # Thanksgiving 26 Nov
    ("Europe/London", "GB", "ENG", datetime(2026, 12, 23, tzinfo=UTC)),  # 25, 28 Dec
    ("America/New_York", "US", None, datetime(2026, 3, 6, 5, tzinfo=UTC)),  # DST, no holiday
]


@st.composite
def calendar_cases(draw: st.DrawFn) -> tuple[Schedule, datetime, datetime]:
    """Recurring windows skipping holidays and listed dates, next to one-shots and plain windows."""
    zone, country, subdivision, anchor = draw(st.sampled_from(CALENDAR_ANCHORS))
    wins = []
    for i in range(draw(st.integers(1, 4))):
        win = draw(windows(i, anchor))
        if win["kind"] == "recurring" and draw(st.booleans()):
            skip: dict[str, Any] = {}
            if draw(st.booleans()):
                skip["holidays"] = {"country": country, "subdivision": subdivision}
            if not skip or draw(st.booleans()):
                offsets = draw(st.lists(st.integers(-1, 5), min_size=1, max_size=3, unique=True))
                skip["dates"] = [(anchor + timedelta(days=d)).date().isoformat() for d in offsets]
            win["skip"] = skip
        wins.append(win)
    doc = {
        "name": "cal",
        "timezone": zone,
        "windows": wins,
        "targets": [{"model_deploy_id": t, "default_state": "stopped"} for t in TARGETS],
    }
    return Schedule.model_validate(doc), anchor, anchor + timedelta(days=draw(st.integers(1, 6)))


@settings(max_examples=120, deadline=None)
@given(calendar_cases())
def test_evaluator_agrees_with_the_minute_oracle_on_holiday_calendars(
    case: tuple[Schedule, datetime, datetime],
) -> None:
    assert_agrees_with_oracle(*case)


@settings(max_examples=60, deadline=None)
@given(calendar_cases(), st.floats(0, 1))
def test_current_interval_agrees_with_intervals_on_holiday_calendars(
    case: tuple[Schedule, datetime, datetime], where: float
) -> None:
    s, start, end = case
    when = start + timedelta(seconds=int((end - start).total_seconds() * where))
    if when >= end:
        return
    for target, rows in intervals(s, start, end).items():
        row = next(r for r in rows if r.start <= when and r.end is not None and when < r.end)
        cur = current_interval(s, target, when)
        assert cur.intent.key == row.intent.key
        assert cur.start == row.start if row.start != start else cur.start <= row.start
