"""Ready-by leads (R-NEXT-1), pure: p90, the lead of a boundary, priority semantics, the cap."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.domain.readyby import Timing, early_targets, leads_in, learned, next_early, p90
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline_doc import ReadyByTimings, build_timeline

SEED = json.loads((Path(__file__).parents[2] / "examples" / "seed-schedule.json").read_text())
A, B = "md-llama70b", "md-qwen32b"
START = {A: Timing(420, 5), B: Timing(400, 5)}
STOP = {A: Timing(50, 5), B: Timing(60, 5)}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text + "+07:00")


def schedule(**changes: Any) -> Schedule:
    doc = copy.deepcopy(SEED)
    doc["targets"][0]["ready_by"] = True
    doc.update(changes)
    return load_schedule(doc)


def leads(s: Schedule, start: str, end: str, cap_s: float = 1800) -> list[Any]:
    return leads_in(s, at(start), at(end), start_times=START, stop_times=STOP, cap_s=cap_s)


def test_p90_is_a_nearest_rank_observation_and_the_default_stands_in_before_history() -> None:
    assert p90([float(s) for s in range(1, 11)]) == 9.0
    assert p90([5.0]) == 5.0
    assert p90([300.0, 100.0, 200.0]) == 300.0
    assert learned([], 300.0) == Timing(300.0, 0) and learned([], 300.0).source == "default"
    assert learned([10.0, 20.0], 300.0) == Timing(20.0, 2)


def test_the_lead_is_the_start_of_a_plus_the_stop_of_the_releasing_b() -> None:
    [lead] = leads(schedule(), "2026-10-19T00:00:00", "2026-10-19T12:00:00")
    assert (lead.boundary, lead.early_at, lead.seconds) == (
        at("2026-10-19T08:00:00"),
        at("2026-10-19T07:52:00"),
        480,
    )
    assert (lead.acquiring, lead.releasing) == ((A,), (B,))
    assert "md-llama70b start p90 420 s (history, 5 obs.)" in lead.reason


def test_only_boundaries_that_start_a_ready_by_target_get_a_lead_and_ends_never_move() -> None:
    week = leads(schedule(), "2026-10-19T00:00:00", "2026-10-26T00:00:00")
    assert [x.boundary.strftime("%a %H:%M") for x in week] == [
        "Mon 08:00",
        "Tue 08:00",
        "Wed 08:00",
        "Thu 08:00",
        "Fri 08:00",
    ]
    plain = copy.deepcopy(SEED)
    assert leads(load_schedule(plain), "2026-10-19T00:00:00", "2026-10-26T00:00:00") == []


def test_an_override_in_force_up_to_the_boundary_wins_until_its_end() -> None:
    """maint-wed (p100) stops A until Wed 15:00: business-hours (p10) takes over then, no lead."""
    week = leads(schedule(), "2026-10-21T12:00:00", "2026-10-21T16:00:00")
    assert week == []


def test_acquire_first_has_no_releasing_lead() -> None:
    [lead] = leads(
        schedule(transition_order="acquire_first"), "2026-10-19T00:00:00", "2026-10-19T12:00:00"
    )
    assert (lead.seconds, lead.releasing) == (420, ())


def test_the_cap_bounds_the_lead_and_the_previous_boundary_clamps_it() -> None:
    [capped] = leads(schedule(), "2026-10-19T00:00:00", "2026-10-19T12:00:00", cap_s=300)
    assert (capped.seconds, capped.capped) == (300, True)
    doc = copy.deepcopy(SEED)
    doc["targets"][0]["ready_by"] = True
    doc["windows"].append(
        {  # A runs 07:00-07:58, stops, starts again at 08:00: the lead starts at 07:58
            "name": "pre",
            "kind": "one_shot",
            "priority": 5,
            "active_from": "2026-10-19T07:00:00+07:00",
            "active_until": "2026-10-19T07:58:00+07:00",
            "states": [{"model_deploy_id": A, "desired_state": "running"}],
        }
    )
    [lead] = leads(load_schedule(doc), "2026-10-19T07:59:00", "2026-10-19T12:00:00")
    assert (lead.early_at, lead.seconds, lead.clamped, lead.releasing) == (
        at("2026-10-19T07:58:00"),
        120,
        True,
        (B,),
    )


@pytest.mark.parametrize("value", ["yes", 1])
def test_ready_by_is_a_boolean(value: Any) -> None:
    from gps_dagster.domain.errors import SpecInvalid

    doc = copy.deepcopy(SEED)
    doc["targets"][0]["ready_by"] = value
    with pytest.raises(SpecInvalid) as err:
        load_schedule(doc)
    assert [(e.path, e.reason) for e in err.value.errors] == [
        ("targets[0].ready_by", "not_a_boolean")
    ]


def test_the_schedule_default_applies_to_targets_without_their_own() -> None:
    doc = copy.deepcopy(SEED)
    doc["ready_by"] = True
    doc["targets"][1]["ready_by"] = False
    s = load_schedule(doc)
    assert (s.is_ready_by(A), s.is_ready_by(B)) == (True, False)
    assert s.to_document()["ready_by"] is True
    assert "ready_by" not in load_schedule(SEED).to_document()


def test_early_targets_inside_the_lead_and_next_early_before_it() -> None:
    s = schedule()
    early, lead = early_targets(
        s, at("2026-10-19T07:55:00"), start_times=START, stop_times=STOP, cap_s=1800
    )
    assert (
        early == {A: at("2026-10-19T08:00:00"), B: at("2026-10-19T08:00:00")} and lead is not None
    )
    assert early_targets(
        s, at("2026-10-19T07:51:59"), start_times=START, stop_times=STOP, cap_s=1800
    ) == ({}, None)
    assert early_targets(
        s, at("2026-10-19T08:00:00"), start_times=START, stop_times=STOP, cap_s=1800
    ) == ({}, None)
    assert next_early(
        s, at("2026-10-19T18:00:00"), start_times=START, stop_times=STOP, cap_s=1800
    ) == at("2026-10-20T07:52:00")
    assert next_early(
        s, at("2026-10-23T18:00:00"), start_times=START, stop_times=STOP, cap_s=1800
    ) == at("2026-10-26T07:52:00")  # over the weekend


def test_the_timeline_shows_each_early_start_with_its_reason_and_figures() -> None:
    s = schedule()
    timings = ReadyByTimings(START, STOP, 1800)
    doc, _ = build_timeline(
        s, None, at("2026-10-19T00:00:00"), at("2026-10-20T00:00:00"), timings=timings
    )
    [row] = doc["ready_by"]
    assert (row["boundary"], row["early_start"], row["lead_s"]) == (
        "2026-10-19T08:00:00+07:00",
        "2026-10-19T07:52:00+07:00",
        480,
    )
    assert row["start_s"] == {A: {"p90_s": 420, "samples": 5, "source": "history"}}
    assert (
        "ready_by"
        not in build_timeline(
            load_schedule(SEED), None, at("2026-10-19T00:00:00"), at("2026-10-20T00:00:00")
        )[0]
    )


def _with_window(window: dict[str, Any], ready_by: bool = True) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    doc["targets"][0]["ready_by"] = ready_by
    doc["windows"].append(
        {
            "name": "early-b",
            "priority": 10,
            **window,
            "states": [{"model_deploy_id": B, "desired_state": "running"}],
        }
    )
    return doc


EARLY_B = [
    {"kind": "recurring", "cron": "30 7 * * 1-5", "duration": "20m"},  # 07:30-07:50 on weekdays
    {
        "kind": "one_shot",
        "active_from": "2026-10-19T07:00:00+07:00",
        "active_until": "2026-10-19T07:45:00+07:00",
    },  # Monday 07:00-07:45
]


@pytest.mark.parametrize("window", EARLY_B, ids=["recurring", "one_shot"])
def test_validation_refuses_an_equal_priority_window_inside_a_ready_by_lead(
    window: dict[str, Any],
) -> None:
    from gps_dagster.domain.errors import SpecInvalid

    load_schedule(_with_window(window, ready_by=False))  # valid without leads: it ends before 08:00
    with pytest.raises(SpecInvalid) as err:
        load_schedule(_with_window(window))
    [e] = err.value.errors
    assert (e.path, e.reason) == ("windows[2].priority", "ambiguous_priority")
    assert "ready-by lead of 'business-hours' (up to 30 min early, the cap)" in e.fix
    assert "md-qwen32b" in e.fix and "higher priority" in e.fix


@pytest.mark.parametrize(
    "window",
    [
        {
            "kind": "recurring",
            "cron": "0 7 * * 1-5",
            "duration": "30m",
        },  # ends 07:30: a whole cap before 08:00
        {
            "kind": "one_shot",
            "active_from": "2026-10-19T06:00:00+07:00",
            "active_until": "2026-10-19T07:30:00+07:00",
        },
        {
            "kind": "recurring",
            "cron": "0 18 * * 1-5",
            "duration": "2h",
        },  # after the end: ends never move
    ],
    ids=["recurring", "one_shot", "after-the-end"],
)
def test_an_equal_priority_window_a_cap_clear_of_every_lead_stays_valid(
    window: dict[str, Any],
) -> None:
    s = load_schedule(_with_window(window))
    assert s.is_ready_by(A) and len(s.windows) == 3
