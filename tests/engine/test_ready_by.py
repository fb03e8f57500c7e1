"""Ready-by replayed (R-NEXT-1): the seed week with A's start 7 min and B's stop 1 min.

The simulator's delays: a start is READY 420 s after it is placed, a stop frees its GPUs 60 s
after it is accepted (publication immediate). The replay starts on Friday 2026-10-16 so the
engine has one observed morning before the seed week (Monday-Friday 19-23 October) is measured;
the same replay without ``ready_by`` is the baseline of the same run.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.simulation import SimulationReport, simulate

EXAMPLES = Path(__file__).parents[2] / "examples"
FRIDAY = datetime.fromisoformat("2026-10-16T00:00:00+07:00")
WEEK = [datetime.fromisoformat(f"2026-10-{d}T08:00:00+07:00") for d in (19, 20, 21, 22, 23)]
A, B = "md-llama70b", "md-qwen32b"


def _replay(ready_by: bool) -> SimulationReport:
    doc: dict[str, Any] = json.loads((EXAMPLES / "seed-schedule.json").read_text())
    if ready_by:
        doc["targets"][0]["ready_by"] = True
    pool = (
        (EXAMPLES / "seed-pool-10.yaml")
        .read_text()
        .replace(
            "timings: {stop_grace_s: 30, publish_lag_s: 60, start_delay_s: 120}",
            "timings: {stop_grace_s: 60, publish_lag_s: 0, start_delay_s: 420}",
        )
    )
    assert "start_delay_s: 420" in pool
    return simulate(
        parse_schedule(json.dumps(doc)), parse_pool(pool), FRIDAY, FRIDAY + timedelta(days=9)
    )


def _a_ready_at(rep: SimulationReport) -> dict[datetime, datetime]:
    out = {}
    for t in rep.transitions:
        for s in t["steps"]:
            if s["target"] == A and s["step"] == "start" and t["boundary"] in WEEK:
                out[t["boundary"]] = s["finished_at"]
    return out


@pytest.fixture(scope="module")
def replays() -> tuple[SimulationReport, SimulationReport]:
    return _replay(ready_by=True), _replay(ready_by=False)


def test_a_is_ready_at_eight_on_all_five_business_days(
    replays: tuple[SimulationReport, ...],
) -> None:
    ready, baseline = replays
    late = {b: (r - b).total_seconds() for b, r in _a_ready_at(ready).items()}
    assert sorted(late) == WEEK
    assert all(abs(s) <= 30 for s in late.values()), late
    before = {b: (r - b).total_seconds() for b, r in _a_ready_at(baseline).items()}
    assert sorted(before) == WEEK and all(s >= 7 * 60 for s in before.values()), (
        before
    )  # ~08:08 today


def test_b_loses_exactly_the_leads_and_the_window_end_does_not_move(
    replays: tuple[SimulationReport, ...],
) -> None:
    ready, _ = replays
    week = [r for r in ready.ready_by if r["boundary"] in WEEK]
    assert [r["boundary"] for r in week] == WEEK
    for row in week:
        assert row["lead_s"] == 480.0  # p90 start 420 s + p90 stop 60 s, both learned
        assert "history" in row["reason"]
        assert row["releasing"][B]["stopped_early_s"] == row["lead_s"]
        assert row["releasing"][B]["gpu_hours"] == pytest.approx(6 * 480 / 3600)
    evening = [
        t
        for t in ready.transitions
        if t["steps"] and t["boundary"].astimezone(FRIDAY.tzinfo).hour == 18
    ]
    assert evening and all(
        s["accepted_at"] >= t["boundary"] for t in evening for s in t["steps"] if s["target"] == A
    )  # A still stops at 18:00, not earlier


def test_an_override_ending_at_a_boundary_wins_until_its_end(
    replays: tuple[SimulationReport, ...],
) -> None:
    """maint-wed (priority 100) stops A until 15:00: no lead starts A inside it."""
    ready, _ = replays
    wed_15 = datetime.fromisoformat("2026-10-21T15:00:00+07:00")
    [tr] = [t for t in ready.transitions if t["boundary"] == wed_15]
    start = next(s for s in tr["steps"] if s["target"] == A)
    assert start["submitted_at"] >= wed_15
    assert wed_15 not in [r["boundary"] for r in ready.ready_by]


def test_early_plans_are_not_clock_skew_and_every_step_converges(
    replays: tuple[SimulationReport, ...],
) -> None:
    ready, _ = replays
    assert not [e for e in ready.events if e["kind"] == "clock_skew"]
    assert {s["phase"] for s in ready.final_status.values()} == {"converged"}
    assert ready.max_gpus_in_use <= 10
