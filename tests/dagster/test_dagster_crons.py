"""Boundary schedule crons: window starts, ends shifted by the duration, or None."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from gps_dagster.dagster_defs import names
from gps_dagster.domain.edge_crons import end_crons, start_crons


@pytest.mark.parametrize(
    ("cron", "duration", "expected"),
    [
        ("0 8 * * 1-5", timedelta(hours=10), ("0 18 * * 1-5",)),  # the seed's business hours
        (
            "0 20 * * MON-FRI",
            timedelta(hours=10),
            ("0 6 * * 2-6",),
        ),  # crosses midnight: weekdays shift
        ("0 22 * * 5", timedelta(hours=4), ("0 2 * * 6",)),
        ("0 22 * * 6", timedelta(hours=4), ("0 2 * * 0",)),  # Saturday night ends on Sunday
        (
            "*/4 * * * *",
            timedelta(minutes=2),
            ("2,6,10,14,18,22,26,30,34,38,42,46,50,54,58 * * * *",),
        ),
        ("30 23 * * *", timedelta(minutes=45), ("15 0 * * *",)),
        ("0,30 9 * * *", timedelta(minutes=45), ("45 9 * * *", "15 10 * * *")),
        ("@daily", timedelta(hours=1), ("0 1 * * *",)),
    ],
)
def test_end_crons(cron: str, duration: timedelta, expected: tuple[str, ...]) -> None:
    assert end_crons(cron, duration) == expected


@pytest.mark.parametrize(
    ("cron", "duration"),
    [
        (
            "0 8 1 * *",
            timedelta(hours=20),
        ),  # day-of-month restricted and the end falls on the next day
        ("0 8 * 6 *", timedelta(hours=20)),  # month restricted, day carry
        ("0 8 * * *", timedelta(hours=1, seconds=3)),  # seconds are not cron
        ("0 8 * * *", timedelta(days=8)),
    ],
)
def test_end_crons_not_expressible(cron: str, duration: timedelta) -> None:
    assert end_crons(cron, duration) is None


def test_start_crons_normalise_names_and_macros() -> None:
    assert start_crons("0 8 * * MON-FRI") == ("0 8 * * 1-5",)
    assert start_crons("@weekly") == ("0 0 * * 0",)
    assert start_crons("0 8 * * 7") == ("0 8 * * 0",)


def test_names_are_readable_dagster_safe_and_distinct() -> None:
    one = ("gpu-pool-h100-shared", "business-hours", "start")
    other = ("gpu_pool_h100_shared", "business_hours", "start")
    alone = names.boundary_schedule_names([one])
    assert alone == {one: "gpu_pool_h100_shared__business_hours__start"}  # no hash: short
    both = names.boundary_schedule_names([one, other])
    a, b = both[one], both[other]
    assert re.fullmatch(r"[A-Za-z0-9_]+", a) and re.fullmatch(r"[A-Za-z0-9_]+", b)
    assert a != b and a.startswith("gpu_pool_h100_shared__business_hours__start_")
    assert names.readable(["md-a", "md_a", "md-b"]) == {
        "md-a": f"md_a_{names.short_hash('md-a')}",
        "md_a": f"md_a_{names.short_hash('md_a')}",
        "md-b": "md_b",
    }
    key = names.step_mapping_key("tr-1/md-llama70b/stop", "md-llama70b")
    assert re.fullmatch(r"^[A-Za-z0-9_]+$", key)
    assert key.startswith("md_llama70b_")
