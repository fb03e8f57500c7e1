"""Cron parsing (R-MODEL-3) and fires with the vixie DST rules (R-EVAL-2)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from gps_dagster.domain.crons import parse_cron
from gps_dagster.domain.documents import FieldErrorCarrier

from .helpers import at


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("0 8 * * 1-5", "weekdays", {1, 2, 3, 4, 5}),
        ("0 8 * * MON-FRI", "weekdays", {1, 2, 3, 4, 5}),
        ("0 8 * * 7", "weekdays", {0}),
        ("0 8 * * 0,7", "weekdays", {0}),
        ("0 8 * * sun", "weekdays", {0}),
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("5-20/5 * * * *", "minutes", {5, 10, 15, 20}),
        ("10/20 * * * *", "minutes", {10, 30, 50}),
        ("0 0 1 JAN,jul *", "months", {1, 7}),
        ("0 0 1 1-3 *", "months", {1, 2, 3}),
        ("0 22,23 * * *", "hours", {22, 23}),
        ("@hourly", "minutes", {0}),
        ("@weekly", "weekdays", {0}),
        ("@monthly", "days", {1}),
        ("@yearly", "months", {1}),
        ("@annually", "months", {1}),
        ("@midnight", "hours", {0}),
        ("@daily", "hours", {0}),
    ],
)
def test_fields_parse(text: str, field: str, expected: set[int]) -> None:
    assert set(getattr(parse_cron(text), field)) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0 0 8 * * 1-5", "cron_six_fields"),
        ("0 8 * *", "invalid_cron"),
        ("61 8 * * *", "invalid_cron"),
        ("0 24 * * *", "invalid_cron"),
        ("0 8 0 * *", "invalid_cron"),
        ("0 8 * 13 *", "invalid_cron"),
        ("0 8 * * 8", "invalid_cron"),
        ("0 8 * * FOO", "invalid_cron"),
        ("0 8 * * 5-1", "invalid_cron"),
        ("*/0 * * * *", "invalid_cron"),
        ("0 8 1,,2 * *", "invalid_cron"),
        ("@reboot", "invalid_cron"),
        ("", "invalid_cron"),
        ("0 0 30 2 *", "invalid_cron"),
    ],
)
def test_bad_crons_are_refused_with_a_reason_and_fix(text: str, reason: str) -> None:
    with pytest.raises(FieldErrorCarrier) as info:
        parse_cron(text)
    assert info.value.field_error.reason == reason
    assert "5 fields" in info.value.field_error.fix


def test_dom_and_dow_both_restricted_match_either() -> None:
    # 1st of the month OR any Monday (classic vixie rule), October 2026.
    tz = ZoneInfo("UTC")
    fires = list(parse_cron("0 9 1 * 1").fires(tz, at("UTC", 2026, 10, 1), at("UTC", 2026, 11, 1)))
    assert [f.day for f in fires] == [1, 5, 12, 19, 26]


CROSS_CHECK = [
    "0 8 * * 1-5",
    "*/20 9-11 * * *",
    "30 2 * * *",
    "0 0 1,15 * *",
    "15 6 * JAN,OCT SAT",
    "0 12 13 * 5",
    "@hourly",
    "@weekly",
    "45 23 * * 0",
    "0 */6 * * *",
]


@pytest.mark.parametrize("tz_name", ["UTC", "Asia/Ho_Chi_Minh"])
@pytest.mark.parametrize("text", CROSS_CHECK)
def test_fires_agree_with_croniter_without_dst(text: str, tz_name: str) -> None:
    tz = ZoneInfo(tz_name)
    start, end = at(tz_name, 2026, 9, 28), at(tz_name, 2026, 11, 3)
    ours = list(parse_cron(text).fires(tz, start, end))
    it = croniter(text, start - timedelta(seconds=1))
    theirs: list[datetime] = []
    while (nxt := it.get_next(datetime)) < end:
        theirs.append(nxt)
    assert ours == theirs
    assert ours  # each expression fires in five weeks


NY, LDN = "America/New_York", "Europe/London"


@pytest.mark.parametrize(
    ("tz", "cron", "day", "expected_utc"),
    [
        # spring forward: 02:00 -> 03:00 EDT on Sun 8 Mar 2026; 02:30 fires at 03:00 EDT = 07:00Z
        (NY, "30 2 * * *", (2026, 3, 8), ["2026-03-08T07:00:00+00:00"]),
        # the gap hour and the hour after fire once each, no duplicate at 03:00
        (NY, "0 2,3 * * *", (2026, 3, 8), ["2026-03-08T07:00:00+00:00"]),
        # fall back: 01:30 happens twice on Sun 1 Nov 2026; fires at the first (EDT) only
        (NY, "30 1 * * *", (2026, 11, 1), ["2026-11-01T05:30:00+00:00"]),
        (LDN, "30 1 * * *", (2026, 3, 29), ["2026-03-29T01:00:00+00:00"]),
        (LDN, "30 1 * * *", (2026, 10, 25), ["2026-10-25T00:30:00+00:00"]),
        # hourly on London fall-back day: 01:00 local fires at BST only, 24 fires in all
        (
            LDN,
            "0 * * * *",
            (2026, 10, 25),
            [
                "2026-10-24T23:00:00+00:00",
                "2026-10-25T00:00:00+00:00",
                *(f"2026-10-25T{h:02d}:00:00+00:00" for h in range(2, 24)),
            ],
        ),
    ],
)
def test_dst_fires(tz: str, cron: str, day: tuple[int, int, int], expected_utc: list[str]) -> None:
    zone = ZoneInfo(tz)
    start = at(tz, *day)
    fires = list(parse_cron(cron).fires(zone, start, start + timedelta(days=1, hours=1)))
    fires = [f for f in fires if f.astimezone(zone).date() == start.date()]
    assert [f.astimezone(ZoneInfo("UTC")).isoformat() for f in fires] == expected_utc


def test_fires_are_in_the_zone_and_increasing_across_a_dst_month() -> None:
    tz = ZoneInfo(NY)
    fires = list(parse_cron("*/30 * * * *").fires(tz, at(NY, 2026, 3, 1), at(NY, 2026, 4, 1)))
    assert {f.tzname() for f in fires} == {"EST", "EDT"}  # local time, fixed offset per instant
    assert all(a < b for a, b in itertools.pairwise(fires))
    assert len(fires) == 31 * 48 - 2  # the gap's two half hours collapse onto 03:00


def test_fires_reject_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="naive"):
        list(
            parse_cron("@daily").fires(ZoneInfo("UTC"), datetime(2026, 1, 1), datetime(2026, 1, 2))
        )
