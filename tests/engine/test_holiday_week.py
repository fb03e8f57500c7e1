"""R-NEXT-2 through the real engine on the simulated pool: Vietnam's National Day week.

The holiday schedule (the seed with ``skip: {holidays: {country: VN}}``) over Mon 31 Aug - Mon
7 Sep 2026: Mon 31 Aug (a day off given for a Saturday), Tue 1 and Wed 2 Sep (National Day) are
skipped, so A is never started and B keeps its GPUs until Thu 08:00; Thu and Fri swap as usual.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.simulation import simulate
from tests.engine.harness import seed_pool

HOLIDAY = Path(__file__).parents[2] / "examples" / "holiday-schedule.json"

MONDAY = datetime.fromisoformat("2026-08-31T00:00:00+07:00")


def test_business_hours_does_not_start_on_the_holidays_and_b_keeps_the_gpus() -> None:
    spec = parse_schedule(HOLIDAY.read_text())
    rep = simulate(spec, load_pool(seed_pool()), MONDAY, MONDAY + timedelta(days=7))
    swaps = [t for t in rep.transitions if t["steps"]]
    assert [t["boundary"].astimezone(MONDAY.tzinfo).strftime("%a %H:%M") for t in swaps] == [
        "Thu 08:00",
        "Thu 18:00",
        "Fri 08:00",
        "Fri 18:00",
    ]
    starts = [o for o in rep.operations if o["deploy"] == "md-llama70b" and o["kind"] == "start"]
    assert len(starts) == 2
    b_stops = [o for o in rep.operations if o["deploy"] == "md-qwen32b" and o["kind"] == "stop"]
    assert len(b_stops) == 2
    # A is late only on the two mornings it starts: grace 30 s + publish 60 s + start 120 s each
    assert rep.downtime_seconds == {"md-llama70b": 2 * (30 + 60 + 120)}
    assert {s["phase"] for s in rep.final_status.values()} == {"converged"}
