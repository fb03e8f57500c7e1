"""Public-holiday calendars (R-NEXT-2): a recurring window's ``skip``.

Vietnam's National Day 2026 (Tue 1 and Wed 2 September, with Mon 31 August given off in
exchange) stops business-hours from starting, so B keeps the GPUs; Tết (16-20 February 2026)
skips a whole working week. Validation refuses what the holidays package does not know, by
field with the fix, and the stored document names the package version that decided.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.domain.calendars import PACKAGE
from gps_dagster.domain.checks import schedule_checks
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.evaluator import current_interval, intervals, next_boundary
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.timeline_doc import build_timeline, skipped_edge, window_occurrences

EXAMPLE = Path(__file__).parents[2] / "examples" / "holiday-schedule.json"
A, B = "md-llama70b", "md-qwen32b"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text + "+07:00")


def doc() -> dict[str, Any]:
    return copy.deepcopy(json.loads(EXAMPLE.read_text()))


def problems(document: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecInvalid) as err:
        load_schedule(document)
    return [(e.path, e.reason) for e in err.value.errors]


def test_on_national_day_business_hours_does_not_start_and_b_keeps_the_gpus() -> None:
    s = load_schedule(doc())
    rows = intervals(s, at("2026-08-31T00:00:00"), at("2026-09-04T00:00:00"))
    spans = [(r.start.isoformat(), r.intent.desired_state.value, r.intent.source) for r in rows[B]]
    assert spans == [
        ("2026-08-31T00:00:00+07:00", "running", "default"),  # Mon 31 Aug (day off), 1, 2 Sep
        ("2026-09-03T08:00:00+07:00", "stopped", "business-hours"),
        ("2026-09-03T18:00:00+07:00", "running", "default"),
    ]
    assert current_interval(s, B, at("2026-09-02T10:00:00")).intent.desired_state.value == "running"
    assert next_boundary(s, at("2026-08-28T18:00:00")) == at("2026-09-03T08:00:00")


def test_tet_skips_a_whole_working_week_and_the_interval_keeps_its_true_start() -> None:
    s = load_schedule(doc())
    cur = current_interval(s, A, at("2026-02-18T10:00:00"))
    assert (cur.start, cur.end) == (at("2026-02-13T18:00:00"), at("2026-02-23T08:00:00"))
    assert cur.intent.desired_state.value == "stopped"


def test_listed_dates_skip_too_and_the_same_document_without_skip_still_starts() -> None:
    s = load_schedule(doc())
    assert current_interval(s, A, at("2026-12-31T10:00:00")).intent.source == "default"
    plain = doc()
    del plain["windows"][0]["skip"]
    p = load_schedule(plain)
    assert current_interval(p, A, at("2026-12-31T10:00:00")).intent.source == "business-hours"
    assert current_interval(p, A, at("2026-09-02T10:00:00")).intent.source == "business-hours"
    assert "skip" not in p.to_document()["windows"][0]  # documents without skip are unchanged


def test_the_document_records_which_package_version_decided() -> None:
    given = doc()
    given["windows"][0]["skip"]["holidays"]["decided_by"] = "holidays 0.1"
    s = load_schedule(given)
    recorded = s.to_document()["windows"][0]["skip"]
    assert recorded == {
        "holidays": {
            "country": "VN",
            "subdivision": None,
            "categories": ["public"],
            "decided_by": PACKAGE,
        },
        "dates": ["2026-12-31"],
    }
    assert load_schedule(s.to_document()) == s  # the stored form round-trips


@pytest.mark.parametrize(
    ("skip", "where", "reason", "fix_names"),
    [
        (
            {"holidays": {"country": "XX"}},
            "windows[0].skip.holidays.country",
            "unknown_country",
            "ISO 3166-1",
        ),
        (
            {"holidays": {"country": "vn"}},
            "windows[0].skip.holidays.country",
            "unknown_country",
            "capitals",
        ),
        (
            {"holidays": {"country": "US", "subdivision": "ZZ"}},
            "windows[0].skip.holidays.subdivision",
            "unknown_subdivision",
            "CA",
        ),
        (
            {"holidays": {"country": "VN", "categories": ["public", "bank"]}},
            "windows[0].skip.holidays.categories[1]",
            "unknown_category",
            "public",
        ),
        (
            {"holidays": {"country": "VN", "categories": []}},
            "windows[0].skip.holidays.categories",
            "too_short",
            "at least 1",
        ),
        ({}, "windows[0].skip", "empty_skip", "dates"),
        ({"dates": ["2026-13-01"]}, "windows[0].skip.dates[0]", "invalid_date", "YYYY-MM-DD"),
        ({"dates": [20261231]}, "windows[0].skip.dates", "invalid_date", "2026-12-31"),
        ({"dates": "2026-12-31"}, "windows[0].skip.dates", "not_a_list", "list"),
    ],
)
def test_validation_refuses_what_the_calendar_does_not_know_by_field_with_the_fix(
    skip: dict[str, Any], where: str, reason: str, fix_names: str
) -> None:
    bad = doc()
    bad["windows"][0]["skip"] = skip
    with pytest.raises(SpecInvalid) as err:
        load_schedule(bad)
    [problem] = err.value.errors
    assert (problem.path, problem.reason) == (where, reason)
    assert fix_names in problem.fix


def test_a_one_shot_window_has_no_skip() -> None:
    bad = doc()
    bad["windows"][1]["skip"] = {"dates": ["2026-10-21"]}
    assert problems(bad) == [("windows[1].skip", "unknown_field")]


def test_the_ambiguity_check_does_not_trust_a_calendar_to_separate_two_windows() -> None:
    """A pair of equal-priority windows that disagree is refused even when every shared
    occurrence is skipped: validity must not change with the next holiday table."""
    d = doc()
    d["windows"][1] = {
        "name": "company-day",
        "kind": "recurring",
        "priority": 10,
        "cron": "0 9 31 12 *",
        "duration": "1h",
        "states": [{"model_deploy_id": A, "desired_state": "stopped"}],
    }
    refused = [(e.path, e.reason) for e in schedule_checks(load_schedule_fields(d))]
    assert refused == [("windows[1].priority", "ambiguous_priority")]


def load_schedule_fields(d: dict[str, Any]) -> Any:
    from gps_dagster.domain.spec import Schedule

    return Schedule.model_validate(d)


def test_timeline_lists_the_skipped_occurrences_with_why_and_who_decided() -> None:
    s = load_schedule(doc())
    timeline, _ = build_timeline(s, None, at("2026-08-31T00:00:00"), at("2026-09-04T00:00:00"))
    assert timeline["skipped"] == [
        {
            "window": "business-hours",
            "start": f"2026-{d}T08:00:00+07:00",
            "end": f"2026-{d}T18:00:00+07:00",
            "date": f"2026-{d}",
            "reason": why,
            "calendar": "VN public",
            "decided_by": PACKAGE,
        }
        for d, why in (
            ("08-31", "Day off (substituted from 08/22/2026)"),
            ("09-01", "National Day"),
            ("09-02", "National Day"),
        )
    ]
    bands = {
        w["name"]: w
        for w in window_occurrences(s, at("2026-08-31T00:00:00"), at("2026-09-04T00:00:00"))
    }
    assert [o["start"] for o in bands["business-hours"]["occurrences"]] == [
        "2026-09-03T08:00:00+07:00"
    ]
    assert len(bands["business-hours"]["skipped"]) == 3 and "skipped" not in bands["maint-wed"]
    plain = doc()
    del plain["windows"][0]["skip"]
    assert (
        "skipped"
        not in build_timeline(
            load_schedule(plain), None, at("2026-08-31T00:00:00"), at("2026-09-04T00:00:00")
        )[0]
    )


def test_a_boundary_tick_on_a_holiday_names_it() -> None:
    s = load_schedule(doc())
    assert skipped_edge(s, "business-hours", at("2026-09-02T08:00:02")) == (
        f"business-hours skipped on 2026-09-02: National Day ({PACKAGE})"
    )
    assert skipped_edge(s, "business-hours", at("2026-09-02T18:00:00")) is not None  # its end tick
    assert skipped_edge(s, "business-hours", at("2026-12-31T08:00:00")) == (
        "business-hours skipped on 2026-12-31: listed date"
    )
    assert skipped_edge(s, "business-hours", at("2026-09-03T08:00:00")) is None
