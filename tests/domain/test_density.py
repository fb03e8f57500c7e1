"""Issue 21 item 2: evaluation cost does not grow with how often a window fires.

Each test asserts on the evaluator's work counter (``occurrences.counting``) and on
memory (tracemalloc), never on wall time. The worst documents here are the densest that
validation accepts; one step denser is refused at write time with ``schedule_too_dense``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gps_dagster.domain.crons import parse_cron
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.evaluator import (
    SEARCH_CALLS,
    current_interval,
    horizon_days,
    intervals,
    max_range_days,
)
from gps_dagster.domain.occurrences import WORK_BUDGET, compile_schedule, cost, counting, runs
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline_doc import build_timeline, window_occurrences

AT = datetime(2026, 10, 20, 3, 0, tzinfo=UTC)
MB = 1024 * 1024


def doc(
    windows: list[tuple[str, str]], *, tz: str = "America/New_York", targets: int = 1
) -> dict[str, Any]:
    """Windows (cron, duration), priorities 1..n, every window naming every target."""
    ids = [f"md-{j}" for j in range(targets)]
    return {
        "name": "dense",
        "timezone": tz,
        "targets": [{"model_deploy_id": t, "default_state": "stopped"} for t in ids],
        "windows": [
            {
                "name": f"w{i}",
                "kind": "recurring",
                "priority": i + 1,
                "cron": cron,
                "duration": dur,
                "states": [{"model_deploy_id": t, "desired_state": "running"} for t in ids],
            }
            for i, (cron, dur) in enumerate(windows)
        ],
    }


WORST: dict[str, list[tuple[str, str]]] = {
    # The issue's attack: 200 windows firing every minute for a minute (back-to-back).
    "200 x every minute for 1m": [("* * * * *", "1m")] * 200,
    # The densest single window that is not back-to-back: 720 runs a day.
    "every 2 minutes for 1m": [("*/2 * * * *", "1m")],
    # Many distinct windows, each 24 runs a day (back-to-back inside each hour).
    "36 x hourly runs": [("0-29 * * * *" if i % 2 else "40-49 * * * *", "1m") for i in range(36)],
    # The demo's shape, twice (three times is refused).
    "2 x the demo": [(f"{(i % 2) * 2}-59/4 * * * *", "2m") for i in range(2)],
}


def _measured(fn: Callable[[], object], *, memory: bool = False) -> tuple[int, int]:
    """(work units, peak bytes or 0) of one call (tracemalloc slows it down tenfold)."""
    if memory:
        tracemalloc.start()
    try:
        with counting() as work:
            fn()
        return work.units, tracemalloc.get_traced_memory()[1] if memory else 0
    finally:
        if memory:
            tracemalloc.stop()


def test_back_to_back_occurrences_are_one_run_never_listed() -> None:
    expr = parse_cron("* * * * *")
    start = int(AT.timestamp())

    with counting() as work:
        found = runs(expr, 60, ZoneInfo("UTC"), start - 400 * 86_400, start + 400 * 86_400)
    assert found == [(found[0][0], found[-1][1])] and len(found) == 1  # UTC: no DST hole
    assert found[0][0] <= start - 400 * 86_400 and found[0][1] >= start + 400 * 86_400
    assert work.units < 3 * 803  # a step and a run per day, not 1,440 occurrences a day


def test_a_fall_back_hole_is_kept_in_closed_form() -> None:
    """New York, 1 Nov 2026: 01:00-01:59 repeats; fires once, so 01:59 EDT + 1m .. 02:00 EST is a
    gap."""
    s = load_schedule(doc([("* * * * *", "1m")]))
    rows = intervals(s, datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 1, 9, tzinfo=UTC))[
        "md-0"
    ]
    assert [(r.start.isoformat(), r.intent.desired_state.value) for r in rows] == [
        ("2026-11-01T00:00:00-04:00", "running"),
        ("2026-11-01T01:00:00-05:00", "stopped"),
        ("2026-11-01T02:00:00-05:00", "running"),
    ]


@pytest.mark.parametrize("name", sorted(WORST))
def test_the_worst_accepted_documents_stay_inside_the_budget(name: str) -> None:
    s = load_schedule(doc(WORST[name]))
    assert horizon_days(s) >= 1 and max_range_days(s) >= 7
    week = (AT, AT + timedelta(days=7))
    calls: dict[str, Callable[[], object]] = {
        "current_interval": lambda: [current_interval(s, t, AT) for t in s.target_ids],
        "timeline week": lambda: (build_timeline(s, None, *week), window_occurrences(s, *week)),
    }
    for what, fn in calls.items():  # memory: tests/api/test_api_density.py, through the server
        units, _ = _measured(fn)
        assert 0 < units <= WORK_BUDGET, (what, units)


def test_the_single_window_of_the_issue_costs_little() -> None:
    """``* * * * *`` for 1m used to take ~11 s and ~170 MB for one dry-run (200 MB measured
    here)."""
    s = load_schedule(doc([("* * * * *", "1m")], tz="UTC"))
    units, peak = _measured(lambda: current_interval(s, "md-0", AT), memory=True)
    assert units < 3_000 and peak < 5 * MB


@pytest.mark.parametrize(
    "windows",
    [
        [("*/2 * * * *", "1m")] * 2,
        [(f"{i % 60}-59 * * * *", "1m") for i in range(200)],
        [("*/2 * * * *", "1m")] * 200,
    ],
)
def test_what_one_call_cannot_afford_is_refused_at_write_time(
    windows: list[tuple[str, str]],
) -> None:
    with pytest.raises(SpecInvalid) as err:
        load_schedule(doc(windows))
    (problem,) = [p for p in err.value.errors if p.reason == "schedule_too_dense"]
    assert problem.path == "windows"
    assert "fire less often" in problem.fix and "split the targets" in problem.fix


def test_ordinary_schedules_keep_the_400_day_horizon() -> None:
    seed = load_schedule(doc([("0 8 * * 1-5", "10h")], tz="Asia/Ho_Chi_Minh", targets=2))
    assert horizon_days(seed) == 400 and max_range_days(seed) > 62


def test_the_horizon_shrinks_with_density_and_is_the_same_at_every_instant() -> None:
    dense: Schedule = load_schedule(doc(WORST["every 2 minutes for 1m"]))
    # 720 runs a day + 1 day stepped = 721 units a day, 2,164 fixed: after the 1-day chunk the
    # search's share of the budget affords 6 days and not 7 (the horizon is what fits, exactly)
    price = cost(compile_schedule(dense))
    assert (price.per_day, price.fixed) == (721, 2164)
    assert horizon_days(dense) == 6
    left = WORK_BUDGET // SEARCH_CALLS - price.of(1)
    assert price.of(6) <= left < price.of(7)
    # the same window, shadowed by an always-on window of the same intent: no change in sight
    shadow = doc([("* * * * *", "1m"), ("*/2 * * * *", "1m")])
    shadowed = load_schedule(shadow)
    first = current_interval(shadowed, "md-0", AT)
    later = current_interval(shadowed, "md-0", AT + timedelta(hours=5))
    assert first.start == later.start  # a stable identity from pass to pass
