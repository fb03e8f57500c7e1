"""The seed week (SPEC §1), pinned: every boundary Mon 19 → Sun 25 Oct 2026, Asia/Ho_Chi_Minh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gps_dagster.domain.evaluator import (
    boundaries,
    effective_intent,
    intervals,
    next_boundary,
    window_edges,
)
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import DesiredState

from .helpers import at

HCM = "Asia/Ho_Chi_Minh"
SEED = load_schedule(
    json.loads((Path(__file__).parents[2] / "examples" / "seed-schedule.json").read_text())
)
A, B = "md-llama70b", "md-qwen32b"
R, S = DesiredState.RUNNING, DesiredState.STOPPED

# (day, hour, A before -> after, source after)
SEED_BOUNDARIES = [
    (19, 8, S, R, "business-hours"),
    (19, 18, R, S, "default"),
    (20, 8, S, R, "business-hours"),
    (20, 18, R, S, "default"),
    (21, 8, S, R, "business-hours"),
    (21, 13, R, S, "maint-wed"),
    (21, 15, S, R, "business-hours"),
    (21, 18, R, S, "default"),
    (22, 8, S, R, "business-hours"),
    (22, 18, R, S, "default"),
    (23, 8, S, R, "business-hours"),
    (23, 18, R, S, "default"),
]


def test_every_boundary_of_the_seed_week() -> None:
    found = boundaries(SEED, at(HCM, 2026, 10, 19), at(HCM, 2026, 10, 26))
    got = [
        (
            b.at.day,
            b.at.hour,
            b.target,
            b.before.desired_state,
            b.after.desired_state,
            b.after.source,
        )
        for b in found
    ]
    want = []
    for day, hour, before, after, source in SEED_BOUNDARIES:
        want.append((day, hour, A, before, after, source))
        want.append((day, hour, B, after, before, source))  # B always does the opposite of A
    assert got == want
    assert all(
        b.at.utcoffset() is not None and b.at.utcoffset().total_seconds() == 7 * 3600 for b in found
    )


@pytest.mark.parametrize(
    ("day", "hour", "minute", "a", "b", "source"),
    [
        (19, 0, 0, S, R, "default"),
        (19, 7, 59, S, R, "default"),
        (19, 8, 0, R, S, "business-hours"),
        (19, 17, 59, R, S, "business-hours"),
        (19, 18, 0, S, R, "default"),
        (21, 12, 59, R, S, "business-hours"),
        (21, 13, 0, S, R, "maint-wed"),
        (21, 14, 59, S, R, "maint-wed"),
        (21, 15, 0, R, S, "business-hours"),
        (23, 17, 59, R, S, "business-hours"),
        (24, 10, 0, S, R, "default"),  # Saturday
        (25, 12, 0, S, R, "default"),  # Sunday
    ],
)
def test_intent_at_pinned_instants(
    day: int, hour: int, minute: int, a: DesiredState, b: DesiredState, source: str
) -> None:
    when = at(HCM, 2026, 10, day, hour, minute)
    ia, ib = effective_intent(SEED, A, when), effective_intent(SEED, B, when)
    assert (ia.desired_state, ib.desired_state, ia.source, ib.source) == (a, b, source, source)


def test_allow_downtime_inherits_the_target_default() -> None:
    business = effective_intent(SEED, A, at(HCM, 2026, 10, 19, 9))
    assert business.allow_downtime is True  # state says nothing, target default is true
    assert effective_intent(SEED, B, at(HCM, 2026, 10, 19, 9)).allow_downtime is False
    assert business.replicas is None


def test_intervals_of_the_week_are_clipped_and_in_the_zone() -> None:
    rows = intervals(SEED, at(HCM, 2026, 10, 19), at(HCM, 2026, 10, 26))
    assert len(rows[A]) == 13 and len(rows[B]) == 13
    assert rows[A][0].start == at(HCM, 2026, 10, 19) and rows[A][-1].end == at(HCM, 2026, 10, 26)
    assert str(rows[A][-1].start) == "2026-10-23 18:00:00+07:00"
    maint = rows[A][6]
    assert (maint.intent.source, maint.intent.occurrence_start) == (
        "maint-wed",
        at(HCM, 2026, 10, 21, 13),
    )
    after = rows[A][7]  # business hours resume: same occurrence as the morning
    assert (after.start, after.intent.occurrence_start) == (
        at(HCM, 2026, 10, 21, 15),
        at(HCM, 2026, 10, 21, 8),
    )


def test_next_boundary_is_strictly_after() -> None:
    assert next_boundary(SEED, at(HCM, 2026, 10, 21, 13)) == at(HCM, 2026, 10, 21, 15)
    assert next_boundary(SEED, at(HCM, 2026, 10, 21, 12, 59)) == at(HCM, 2026, 10, 21, 13)
    assert next_boundary(SEED, at(HCM, 2026, 10, 23, 18)) == at(
        HCM, 2026, 10, 26, 8
    )  # over the weekend


def test_window_edges_list_every_occurrence_edge() -> None:
    edges = window_edges(SEED, at(HCM, 2026, 10, 21), at(HCM, 2026, 10, 22))
    assert [(e.hour, name, kind) for e, name, kind in edges] == [
        (8, "business-hours", "start"),
        (13, "maint-wed", "start"),
        (15, "maint-wed", "end"),
        (18, "business-hours", "end"),
    ]
