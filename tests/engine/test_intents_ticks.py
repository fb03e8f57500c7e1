"""What the orchestrator's ticks ask the engine and what they say (``engine/intents.py``,
``engine/ticks.py``, ``engine/prearm.py``), without Dagster: the due work served with a line per
schedule, the pre-armed pass at its boundary, the measured pre-arm lead, the skip reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gps_dagster.clocks import VirtualClock
from gps_dagster.engine import ticks
from gps_dagster.engine.intents import Armed, Intents
from gps_dagster.engine.plan_inputs import ScheduleOutcome
from gps_dagster.engine.prearm import (
    DEFAULT_LEAD_S,
    MAX_LEAD_S,
    lead_from_env,
    measured_lead,
    wait_until,
)
from gps_dagster.engine.reports import PassReport, PlanRef
from tests.engine.harness import World, local, make_world

BEFORE_EIGHT = local("2026-10-19T07:59:00")
EIGHT = local("2026-10-19T08:00:00")


def intents(w: World) -> Intents:
    return Intents(w.engine, w.store)


def settled(sqlite_url: str) -> World:
    w = make_world(sqlite_url, start=local("2026-10-19T07:00:00"))
    w.run_until(BEFORE_EIGHT)
    w.clock.set(BEFORE_EIGHT)
    return w


def test_a_storm_tick_says_what_it_served_in_one_line() -> None:
    report = PassReport(at=EIGHT, trigger="boundary")
    many = ticks.STORM_LINES + 1
    report.schedules = [ScheduleOutcome(f"s{i}", 1, opened=["t"]) for i in range(many)]
    report.schedules.append(ScheduleOutcome("calm", 1))
    assert ticks.served_lines(report, many) == [f"{many + 1} schedule(s) due: {many} new plan(s)"]
    report.schedules = report.schedules[-3:]
    assert ticks.served_lines(report, 2) == [
        f"s{many - 2}: 1 plan(s)",
        f"s{many - 1}: 1 plan(s)",
        "1 schedule(s) due, no new plan (intent met, or steps in flight): calm",
    ]


def test_the_skip_reasons_say_why_nothing_was_launched() -> None:
    assert ticks.capacity_skip([]) == "no step waits for capacity"
    assert ticks.capacity_skip(["b", "a", "b"]) == (
        "3 step(s) wait for capacity and none fits yet: a, b"
    )
    assert ticks.reconcile_skip(2).endswith("; 2 deploy status change(s) recorded")
    assert ticks.with_warning("quiet", "") == "quiet"
    assert ticks.with_warning("quiet", "x is stopped") == "WARNING: x is stopped | quiet"
    assert ticks.with_warning(None, "x is stopped") is None
    assert ticks.reservation_tick([], [], [], 3) == (
        "3 reservation partition(s) up to date, members and verdicts unchanged"
    )
    assert ticks.reservation_tick(["r1"], ["r0"], ["r2"], 1) == (
        "partition(s) added: r1; partition(s) removed: r0; "
        "members or verdicts changed, recorded: r2"
    )
    tick = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
    assert ticks.late_tick(tick, tick.isoformat()) is None
    assert ticks.late_tick(tick, "2026-10-19T02:00:00+00:00") == (
        "tick of 2026-10-19T01:00:00+00:00 serves the boundary of 2026-10-19T02:00:00+00:00"
    )


def test_the_pre_arm_lead_is_the_measured_start_p95_and_a_margin() -> None:
    def started(*waits: float) -> list[tuple[float, float | None, float | None]]:
        return [(1000.0, 1000.0 + w, 1000.0 + w + 1) for w in waits]

    assert measured_lead([]) == DEFAULT_LEAD_S
    assert measured_lead(started(*[3.3] * 20)) == DEFAULT_LEAD_S
    assert measured_lead(started(*[33.0] * 20)) == 66.0
    assert measured_lead([(1000.0, None, 1001.0), *started(80.0)]) == 160.0
    assert measured_lead(started(5000.0)) == MAX_LEAD_S
    now = datetime.fromtimestamp(1070.0, UTC)  # a run created at 1000 s, not started yet
    assert measured_lead([(1000.0, None, None)], now) == 140.0
    assert measured_lead([(1000.0, None, None)]) == DEFAULT_LEAD_S
    assert lead_from_env({}) is None and lead_from_env({"GPS_PREARM_LEAD_S": " 90 "}) == 90.0
    with pytest.raises(ValueError, match="fix: unset it"):
        lead_from_env({"GPS_PREARM_LEAD_S": "soon"})


def test_due_work_is_served_with_a_line_per_schedule_or_says_when_it_is_due(
    sqlite_url: str,
) -> None:
    w = settled(sqlite_url)
    quiet = intents(w).serve_due(BEFORE_EIGHT, "boundary", release_first_only=False)
    assert not quiet.due and quiet.plans == []
    assert quiet.lines == [f"nothing due (next pass due at {EIGHT.astimezone(UTC).isoformat()})"]
    w.clock.set(EIGHT)
    served = intents(w).serve_due(EIGHT, "boundary", release_first_only=True)
    assert served.due and len(served.plans) == 1
    assert served.lines == [f"{w.spec.name}: 1 plan(s)"]


def test_a_pre_armed_pass_opens_claims_and_submits_its_releases_at_the_boundary(
    sqlite_url: str,
) -> None:
    w = settled(sqlite_url)
    w.clock.set(EIGHT)
    claimed: list[PlanRef] = []

    def claim(plan: PlanRef) -> str | None:
        claimed.append(plan)
        return None

    armed = intents(w).arm(w.spec.name, "08:00", trigger="prearmed", pause=None, claim=claim)
    assert isinstance(armed, Armed) and claimed == [armed.plan]
    assert [o.step_id for o in armed.sent] == [s.step_id for s in armed.plan.release_steps]
    again = intents(w).arm(w.spec.name, "08:00", trigger="prearmed", pause=None, claim=claim)
    assert again == "no new plan at 08:00: intent unchanged, or already served"


def test_a_pre_armed_run_waits_for_its_boundary_on_the_clock_a_second_at_a_time() -> None:
    clock = VirtualClock(BEFORE_EIGHT)
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        clock.advance(seconds)

    assert wait_until(clock, EIGHT - timedelta(seconds=2.5), pause) == 0.0
    assert pauses == [1.0] * 57 + [0.5]
    assert wait_until(clock, BEFORE_EIGHT, pause) == 57.5  # past already: how late, no pause


def test_the_asset_graph_names_the_deploys_bound_to_a_reservation(sqlite_url: str) -> None:
    w = settled(sqlite_url)
    assert intents(w).reservation_members([]) == set()
    assert intents(w).reservation_members([w.spec.targets[0].model_deploy_id]) == set()
