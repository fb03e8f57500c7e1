"""Schedule validation (R-MODEL-1…8): every rejection has a field path, a reason and a fix."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.schedules import load_schedule, parse_schedule
from gps_dagster.domain.spec import OneShotWindow, RecurringWindow

SEED = json.loads((Path(__file__).parents[2] / "examples" / "seed-schedule.json").read_text())


def errors_of(mutate: Callable[[dict[str, Any]], None]) -> list[tuple[str, str]]:
    doc = copy.deepcopy(SEED)
    mutate(doc)
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc, source="seed")
    assert all(e.fix for e in info.value.errors)
    assert info.value.source == "seed"
    return [(e.path, e.reason) for e in info.value.errors]


def _set(path: list[str | int], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        node: Any = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            _set(["windows", 0, "states", 1, "replicas"], 0),
            ("windows[0].states[1].replicas", "replicas_zero"),
        ),
        (
            _set(["windows", 0, "states", 1, "replicas"], -2),
            ("windows[0].states[1].replicas", "replicas_negative"),
        ),
        (
            _set(["windows", 1, "active_from"], "2026-10-21T13:00:00"),
            ("windows[1].active_from", "naive_datetime"),
        ),
        (
            _set(["windows", 1, "active_until"], "next tuesday"),
            ("windows[1].active_until", "invalid_datetime"),
        ),
        (_set(["timezone"], "Asia/Saigon_Nowhere"), ("timezone", "unknown_timezone")),
        (_set(["windows", 0, "cron"], "0 0 8 * * 1-5"), ("windows[0].cron", "cron_six_fields")),
        (_set(["windows", 0, "cron"], "0 25 * * 1-5"), ("windows[0].cron", "invalid_cron")),
        (_set(["windows", 0, "duration"], "0h"), ("windows[0].duration", "duration_not_positive")),
        (
            _set(["windows", 0, "duration"], "ten hours"),
            ("windows[0].duration", "invalid_duration"),
        ),
        (_set(["windows", 0, "duration"], 36000), ("windows[0].duration", "invalid_duration")),
        (_set(["mode"], "yolo"), ("mode", "invalid_value")),
        (_set(["transition_order"], "random"), ("transition_order", "invalid_value")),
        (
            _set(["targets", 0, "default_state"], "paused"),
            ("targets[0].default_state", "invalid_value"),
        ),
        (_set(["targets", 1, "default_replicas"], 0), ("targets[1].default_replicas", "too_small")),
        (
            _set(["windows", 0, "kind"], "weekly"),
            ("windows[0]", "invalid_value"),
        ),  # the union's tag
        (_set(["windows", 0, "priority"], "high"), ("windows[0].priority", "not_an_integer")),
        (_set(["windows", 0, "colour"], "red"), ("windows[0].colour", "unknown_field")),
        (_set(["name"], "Bad Name!"), ("name", "invalid_name")),
        (
            _set(["windows", 0, "states", 0, "model_deploy_id"], "md-ghost"),
            ("windows[0].states[0].model_deploy_id", "unknown_target"),
        ),
        (_set(["windows", 1, "name"], "business-hours"), ("windows[1].name", "duplicate_window")),
        (
            lambda d: d["targets"].append(
                {"model_deploy_id": "md-qwen32b", "default_state": "stopped"}
            ),
            ("targets[2].model_deploy_id", "duplicate_target"),
        ),
        (
            _set(["windows", 0, "states", 1, "model_deploy_id"], "md-llama70b"),
            ("windows[0].states[1].model_deploy_id", "duplicate_state"),
        ),
        (
            _set(["windows", 1, "active_until"], "2026-10-21T13:00:00+07:00"),
            ("windows[1].active_until", "empty_window"),
        ),
        (
            _set(["windows", 0, "duration"], "1d1h"),
            ("windows[0].duration", "overlapping_occurrences"),
        ),
        (_set(["windows", 1, "priority"], 10), ("windows[1].priority", "ambiguous_priority")),
    ],
)
def test_each_bad_input_is_one_precise_error(
    mutate: Callable[[dict[str, Any]], None], expected: tuple[str, str]
) -> None:
    assert errors_of(mutate) == [expected]


def test_the_seed_is_valid_and_frozen() -> None:
    s = load_schedule(SEED)
    assert s.name == "gpu-pool-h100-shared"
    assert isinstance(s.windows[0], RecurringWindow) and isinstance(s.windows[1], OneShotWindow)
    with pytest.raises(Exception, match="frozen"):
        s.name = "other"  # type: ignore[misc]


def test_every_field_problem_is_reported_at_once() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["timezone"] = "Mars/Olympus"
        doc["windows"][0]["cron"] = "*/5 * * * * *"
        doc["windows"][0]["states"][1]["replicas"] = 0
        doc["windows"][1]["active_from"] = "2026-10-21T13:00:00"

    assert sorted(errors_of(mutate)) == [
        ("timezone", "unknown_timezone"),
        ("windows[0].cron", "cron_six_fields"),
        ("windows[0].states[1].replicas", "replicas_zero"),
        ("windows[1].active_from", "naive_datetime"),
    ]


def test_every_cross_field_problem_is_reported_at_once() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["windows"][1]["name"] = "business-hours"
        doc["windows"][0]["states"][0]["model_deploy_id"] = "md-ghost"
        doc["windows"][1]["states"][1]["model_deploy_id"] = "md-other"

    assert errors_of(mutate) == [
        ("windows[0].states[0].model_deploy_id", "unknown_target"),
        ("windows[1].name", "duplicate_window"),
        ("windows[1].states[1].model_deploy_id", "unknown_target"),
    ]


def test_replicas_zero_message_points_to_stopped() -> None:
    with pytest.raises(SpecInvalid) as info:
        load_schedule(
            {
                **SEED,
                "windows": [
                    {
                        **SEED["windows"][0],
                        "states": [
                            {"model_deploy_id": "md-llama70b", "desired_state": "running"},
                            {
                                "model_deploy_id": "md-qwen32b",
                                "desired_state": "running",
                                "replicas": 0,
                            },
                        ],
                    }
                ],
            }
        )
    assert str(info.value.errors[0]) == (
        'windows[0].states[1].replicas: replicas_zero — use "desired_state": "stopped" to stop a '
        "deploy"
    )


def test_ambiguous_priority_names_both_windows_and_the_first_overlap() -> None:
    doc = copy.deepcopy(SEED)
    doc["windows"][1]["priority"] = 10
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc)
    fix = info.value.errors[0].fix
    assert "'business-hours'" in fix and "'maint-wed'" in fix
    assert "2026-10-21T13:00:00+07:00" in fix


def test_equal_priorities_that_agree_or_never_meet_are_fine() -> None:
    doc = copy.deepcopy(SEED)
    doc["windows"][1]["priority"] = 10
    doc["windows"][1]["active_from"] = "2026-10-24T13:00:00+07:00"  # a Saturday: no business hours
    doc["windows"][1]["active_until"] = "2026-10-24T15:00:00+07:00"
    assert load_schedule(doc).windows[1].priority == 10
    doc = copy.deepcopy(SEED)
    doc["windows"][1]["priority"] = 10
    doc["windows"][1]["states"] = [{"model_deploy_id": "md-llama70b", "desired_state": "running"}]
    assert load_schedule(doc).windows[1].priority == 10


def test_a_past_one_shot_is_checked_over_its_own_span() -> None:
    """Regression: only a year "from today" was checked, so a past clash was accepted."""
    doc = copy.deepcopy(SEED)
    doc["windows"][1]["priority"] = 10
    doc["windows"][1]["active_from"] = "2020-10-21T13:00:00+07:00"  # a Wednesday, long ago
    doc["windows"][1]["active_until"] = "2020-10-21T15:00:00+07:00"
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc)
    assert info.value.reasons == ("ambiguous_priority",)
    assert "2020-10-21T13:00:00+07:00" in info.value.errors[0].fix


def test_overlap_uses_the_shortest_gap_between_fires() -> None:
    doc = copy.deepcopy(SEED)
    doc["windows"][0]["cron"] = "0 8,20 * * *"  # gaps of 12 h
    doc["windows"][0]["duration"] = "12h"  # touching occurrences do not overlap
    assert load_schedule(doc).windows[0].duration.total_seconds() == 12 * 3600
    doc["windows"][0]["cron"] = "0 8,10 * * *"  # shortest gap 2 h
    doc["windows"][0]["duration"] = "2h1m"
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc)
    assert info.value.reasons == ("overlapping_occurrences",)


def test_dst_shortens_a_daily_gap_to_23_hours() -> None:
    doc = copy.deepcopy(SEED)
    doc["timezone"] = "America/New_York"
    doc["windows"][0]["cron"] = "0 8 * * *"
    doc["windows"][0]["duration"] = (
        "23h30m"  # fine in Hanoi (24 h gaps), too long in New York in March
    )
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc)
    assert info.value.reasons == ("overlapping_occurrences",)
    assert "1380 min" in info.value.errors[0].fix


def test_yaml_and_json_text_parse_the_same() -> None:
    import yaml

    from_json = parse_schedule(json.dumps(SEED))
    from_yaml = parse_schedule(yaml.safe_dump(SEED))
    assert from_json == from_yaml


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{not json", "invalid_json"), ("a: [1, 2", "invalid_yaml"), ("- 1\n- 2\n", "not_an_object")],
)
def test_unparsable_text(text: str, reason: str) -> None:
    with pytest.raises(SpecInvalid) as info:
        parse_schedule(text)
    assert info.value.reasons == (reason,)


def test_document_round_trip() -> None:
    s = load_schedule(SEED)
    doc = s.to_document()
    assert doc["windows"][0]["duration"] == "10h"
    assert load_schedule(doc) == s
