"""DST tables (R-EVAL-2) for America/New_York and Europe/London, 2026.

New York: spring forward Sun 8 Mar 02:00 EST -> 03:00 EDT; fall back Sun 1 Nov
02:00 EDT -> 01:00 EST. London: spring forward Sun 29 Mar 01:00 GMT -> 02:00
BST; fall back Sun 25 Oct 02:00 BST -> 01:00 GMT. Durations are elapsed time,
so a window crossing a change ends at a different wall time than it would
without it. Expectations are written in UTC so no wall-clock ambiguity leaks
into the table.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gps_dagster.domain.evaluator import effective_intent, intervals
from gps_dagster.domain.spec import DesiredState

from .helpers import at, recurring, schedule

NY, LDN = "America/New_York", "Europe/London"


def running_spans(
    tz: str, cron: str, duration: str, start: tuple[int, ...], end: tuple[int, ...]
) -> list[tuple[str, str]]:
    s = schedule([recurring("w", cron, duration)], tz=tz)
    rows = intervals(s, at(tz, *start), at(tz, *end))["a"]
    return [
        (
            r.start.astimezone(UTC).strftime("%m-%d %H:%M"),
            r.end.astimezone(UTC).strftime("%m-%d %H:%M"),
        )
        for r in rows
        if r.end is not None and r.intent.desired_state is DesiredState.RUNNING
    ]


@pytest.mark.parametrize(
    ("tz", "cron", "duration", "start", "end", "expected_utc"),
    [
        # NY spring forward: 02:30 does not exist on 8 Mar; fires at 03:00 EDT (07:00Z)
        (
            NY,
            "30 2 * * *",
            "1h",
            (2026, 3, 7),
            (2026, 3, 10),
            [
                ("03-07 07:30", "03-07 08:30"),
                ("03-08 07:00", "03-08 08:00"),
                ("03-09 06:30", "03-09 07:30"),
            ],
        ),
        # NY fall back: 01:30 happens twice on 1 Nov; the occurrence starts at the first (EDT,
        # 05:30Z)
        (
            NY,
            "30 1 * * *",
            "1h",
            (2026, 10, 31),
            (2026, 11, 3),
            [
                ("10-31 05:30", "10-31 06:30"),
                ("11-01 05:30", "11-01 06:30"),
                ("11-02 06:30", "11-02 07:30"),
            ],
        ),
        # business hours keep their wall times on both sides of the change (10 h elapsed each)
        (
            NY,
            "0 8 * * 1-5",
            "10h",
            (2026, 3, 6),
            (2026, 3, 10),
            [("03-06 13:00", "03-06 23:00"), ("03-09 12:00", "03-09 22:00")],
        ),
        # crossing midnight into fall-back night: 22:00 EDT + 4 h elapsed = 01:00 EST (the second
        # 01:00)
        (NY, "0 22 * * 6", "4h", (2026, 10, 31), (2026, 11, 2), [("11-01 02:00", "11-01 06:00")]),
        # a weekend window over spring forward: Fri 18:00 EST + 63 h = Mon 10:00 EDT
        (NY, "0 18 * * 5", "2d15h", (2026, 3, 6), (2026, 3, 11), [("03-06 23:00", "03-09 14:00")]),
        # a window crossing the week end (Sun 22:00 -> Mon 02:00) on NY fall-back Sunday
        (NY, "0 22 * * 0", "4h", (2026, 11, 1), (2026, 11, 3), [("11-02 03:00", "11-02 07:00")]),
        # London spring forward: 01:30 does not exist on 29 Mar; fires at 02:00 BST (01:00Z)
        (
            LDN,
            "30 1 * * *",
            "30m",
            (2026, 3, 28),
            (2026, 3, 31),
            [
                ("03-28 01:30", "03-28 02:00"),
                ("03-29 01:00", "03-29 01:30"),
                ("03-30 00:30", "03-30 01:00"),
            ],
        ),
        # London fall back: 01:30 twice on 25 Oct; first occurrence (BST, 00:30Z) only
        (
            LDN,
            "30 1 * * *",
            "1h",
            (2026, 10, 24),
            (2026, 10, 27),
            [
                ("10-24 00:30", "10-24 01:30"),
                ("10-25 00:30", "10-25 01:30"),
                ("10-26 01:30", "10-26 02:30"),
            ],
        ),
        # Saturday 23:00 BST + 4 h elapsed ends at 02:00 GMT on Sunday (3 wall hours later)
        (LDN, "0 23 * * 6", "4h", (2026, 10, 24), (2026, 10, 26), [("10-24 22:00", "10-25 02:00")]),
        # weekend over London spring forward: Fri 18:00 GMT + 63 h = Mon 10:00 BST
        (
            LDN,
            "0 18 * * 5",
            "2d15h",
            (2026, 3, 27),
            (2026, 3, 31),
            [("03-27 18:00", "03-30 09:00")],
        ),
        # an hourly 30-minute window through the London gap: 01:00 is skipped, fires at 02:00 BST
        (
            LDN,
            "0 0-3 * * 0",
            "30m",
            (2026, 3, 29),
            (2026, 3, 30),
            [
                ("03-29 00:00", "03-29 00:30"),
                ("03-29 01:00", "03-29 01:30"),
                ("03-29 02:00", "03-29 02:30"),
            ],
        ),
    ],
)
def test_dst_table(
    tz: str,
    cron: str,
    duration: str,
    start: tuple[int, ...],
    end: tuple[int, ...],
    expected_utc: list[tuple[str, str]],
) -> None:
    assert running_spans(tz, cron, duration, start, end) == expected_utc


def test_repeated_hour_second_pass_is_outside_the_window() -> None:
    s = schedule([recurring("w", "30 1 * * *", "30m")], tz=NY)
    first = at(NY, 2026, 11, 1, 1, 45)  # EDT
    second = at(NY, 2026, 11, 1, 1, 45, fold=1)  # EST, one hour later
    assert effective_intent(s, "a", first).desired_state is DesiredState.RUNNING
    assert effective_intent(s, "a", second).desired_state is DesiredState.STOPPED


def test_returned_instants_carry_the_right_offset_in_the_repeated_hour() -> None:
    s = schedule([recurring("w", "0 22 * * 6", "4h")], tz=NY)
    rows = intervals(s, at(NY, 2026, 10, 31, 12), at(NY, 2026, 11, 1, 12))["a"]
    end = rows[1].end
    assert end is not None
    assert end.isoformat() == "2026-11-01T01:00:00-05:00"
    # PEP 495: a fold=1 instant never compares equal across zones; compare instants via UTC
    assert end.astimezone(UTC) == datetime(2026, 11, 1, 6, tzinfo=UTC)
