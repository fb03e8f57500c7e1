"""Bad input that used to escape as a traceback or a wrong verdict (issue 9 §3), per parser.

Each test is named after the defect; each failed on the code before the fix
(a traceback, an accepted document, or a raw Python message).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.reservations import parse_reservation_spec
from gps_dagster.domain.pool import load_pool, parse_pool
from gps_dagster.domain.schedules import load_schedule, parse_schedule
from gps_dagster.domain.spec import MAX_WINDOWS

EXAMPLES = Path(__file__).parents[2] / "examples"
SEED = json.loads((EXAMPLES / "seed-schedule.json").read_text())
POOL = {
    "name": "p",
    "nodes": [{"name": "n1", "gpus": 8}],
    "deploys": [{"id": "d", "gpus_per_replica": 2}],
}
RESERVATION = (EXAMPLES / "gpu42-reservation.yaml").read_text()

Parser = Callable[[str], object]
PARSERS: dict[str, Parser] = {
    "schedule": lambda text: parse_schedule(text),
    "pool": lambda text: parse_pool(text),
    "reservation": lambda text: parse_reservation_spec(text),
}


def seed(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    mutate(doc)
    return doc


def errors(doc: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc)
    assert all(e.fix and "\n" not in e.fix for e in info.value.errors)
    return [(e.path, e.reason) for e in info.value.errors]


def text_errors(parser: Parser, text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecInvalid) as info:
        parser(text)
    return [(e.path, e.reason) for e in info.value.errors]


def window0(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["windows"][0].__setitem__(key, value)


# -- tracebacks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "duration", ["9999999999d", "99999999999999999999h", "3661d", "1" * 5000 + "s"]
)
def test_huge_duration_is_a_field_error_not_an_overflow_error(duration: str) -> None:
    reason = "invalid_duration" if len(duration) > 40 else "duration_too_long"
    assert errors(seed(window0("duration", duration))) == [("windows[0].duration", reason)]


@pytest.mark.parametrize("kind", sorted(PARSERS))
@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_deep_nesting_is_a_document_error_not_a_recursion_error(kind: str, syntax: str) -> None:
    deep = "[" * 1500 + "]" * 1500
    text = '{"name": ' + deep + "}" if syntax == "json" else "name: " + deep + "\n"
    # deeper than the parsers' own stack: no document is left, but the path still is (#6)
    assert text_errors(PARSERS[kind], text) == [("name" + "[0]" * 31, "too_deep")]


def test_deep_nesting_of_an_already_parsed_document_is_refused_before_validation() -> None:
    doc: Any = "x"
    for _ in range(200):
        doc = {"a": [doc]}
    # refused where it crosses 32 levels, and the document's other problem reported too
    assert errors({**SEED, "extra": doc}) == [
        ("extra" + ".a[0]" * 15 + ".a", "too_deep"),
        ("extra", "unknown_field"),
    ]


@pytest.mark.parametrize("kind", sorted(PARSERS))
@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_an_integer_literal_of_5000_digits_is_a_document_error_not_a_value_error(
    kind: str, syntax: str
) -> None:
    number = "9" * 5000
    text = '{"name": ' + number + "}" if syntax == "json" else f"name: {number}\n"
    found = text_errors(PARSERS[kind], text)
    assert found[0] == ("name", "number_too_long")  # at its path (issue 25 #6) ...
    assert len(found) > 1 and all(path for path, _ in found)  # ... the missing fields after it


def test_a_yaml_alias_bomb_is_a_document_error() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    [(path, reason)] = text_errors(PARSERS["schedule"], "\n".join(lines) + "\n")
    assert reason == "document_too_large" and path.startswith("a7[")  # where the count ran out


@pytest.mark.parametrize("zone", ["America", "A" * 300, "Europe/../UTC", "Asia/Ho_Chi_Minh\n"])
def test_a_time_zone_that_is_a_directory_or_too_long_is_unknown_not_an_os_error(zone: str) -> None:
    assert errors({**SEED, "timezone": zone}) == [("timezone", "unknown_timezone")]


def test_a_one_shot_in_year_one_is_refused_at_validation_not_a_timeline_crash() -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["windows"][1]["active_from"] = "0001-01-01T00:00:00+07:00"
        d["windows"][1]["active_until"] = "0001-01-02T00:00:00+07:00"

    assert errors(seed(mutate)) == [
        ("windows[1].active_from", "instant_out_of_range"),
        ("windows[1].active_until", "instant_out_of_range"),
    ]


@pytest.mark.parametrize(
    ("start", "end", "ok"),
    [
        ("1970-01-01T00:00:00Z", "1970-01-01T02:00:00Z", True),
        ("1969-12-31T23:00:00Z", "1970-01-01T02:00:00Z", False),
        ("8999-12-31T00:00:00Z", "8999-12-31T23:59:59Z", True),
        ("9999-12-31T00:00:00Z", "9999-12-31T23:59:59Z", False),
    ],
)
def test_one_shot_instants_lie_in_1970_to_9000(start: str, end: str, ok: bool) -> None:
    doc = seed(lambda d: d["windows"][1].update(active_from=start, active_until=end))
    if ok:
        assert load_schedule(doc).windows[1].name == "maint-wed"
    else:
        assert "instant_out_of_range" in {r for _, r in errors(doc)}


# -- wrong verdicts -------------------------------------------------------------------------------


def test_verdict_does_not_depend_on_today_maint_wed_at_priority_10_is_ambiguous() -> None:
    """2026-10-21 lies in the past of any horizon that starts today: it was accepted."""
    doc = seed(lambda d: d["windows"][1].__setitem__("priority", 10))
    with pytest.raises(SpecInvalid) as info:
        load_schedule(doc)
    assert info.value.reasons == ("ambiguous_priority",)
    assert "2026-10-21T13:00:00+07:00" in info.value.errors[0].fix


def test_a_clash_eighteen_years_ahead_is_found() -> None:
    """29 February falls on a Monday in 2044 only: a one-year horizon never saw it."""

    def mutate(d: dict[str, Any]) -> None:
        d["windows"][0]["cron"] = "0 8 * * 1"
        d["windows"][1] = {
            **d["windows"][0],
            "name": "leap-day",
            "cron": "0 8 29 2 *",
            "states": [{"model_deploy_id": "md-llama70b", "desired_state": "stopped"}],
        }

    with pytest.raises(SpecInvalid) as info:
        load_schedule(seed(mutate))
    assert info.value.reasons == ("ambiguous_priority",)
    assert "2044-02-29T08:00:00+07:00" in info.value.errors[0].fix


@pytest.mark.parametrize(
    ("cron", "duration", "ok"),
    [
        ("@yearly", "400d", False),
        ("@yearly", "365d", True),
        ("0 0 29 2 *", "1500d", False),
        ("0 0 29 2 *", "1461d", True),
        ("0 0 1 * *", "29d", False),
    ],
)
def test_sparse_crons_overlapping_themselves_are_refused(
    cron: str, duration: str, ok: bool
) -> None:
    doc = seed(lambda d: d["windows"][0].update(cron=cron, duration=duration))
    if ok:
        assert load_schedule(doc).windows[0].name == "business-hours"
    else:
        assert errors(doc) == [("windows[0].duration", "overlapping_occurrences")]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("10", "not_an_integer"),
        (10.0, "not_an_integer"),
        (True, "not_an_integer"),
        (10**12, "too_large"),
    ],
)
def test_priorities_are_not_coerced(value: Any, reason: str) -> None:
    assert errors(seed(window0("priority", value))) == [("windows[0].priority", reason)]


@pytest.mark.parametrize("value", ["yes", "true", 1, "on"])
def test_booleans_are_not_coerced(value: Any) -> None:
    doc = seed(lambda d: d["targets"][0].__setitem__("default_allow_downtime", value))
    assert errors(doc) == [("targets[0].default_allow_downtime", "not_a_boolean")]


def test_yaml_1_1_scalars_are_not_booleans_octals_or_sexagesimals() -> None:
    import yaml

    text = yaml.safe_dump(SEED).replace(
        "default_allow_downtime: true", "default_allow_downtime: yes"
    )
    assert text_errors(PARSERS["schedule"], text) == [
        ("targets[0].default_allow_downtime", "not_a_boolean")
    ]
    text = yaml.safe_dump(SEED).replace("priority: 100", "priority: 0100")
    assert parse_schedule(text).windows[1].priority == 100  # not 64 (octal)


def test_an_epoch_number_is_not_an_instant() -> None:
    doc = seed(lambda d: d["windows"][1].__setitem__("active_from", 1792562400))
    assert errors(doc) == [("windows[1].active_from", "invalid_datetime")]


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (["windows", 0, "states", 0, "replicas"], 10**12, "too_large"),
        (["targets", 1, "default_replicas"], 2.0, "not_an_integer"),
        (["targets", 0, "model_deploy_id"], "d" * 201, "too_long"),
        (["enabled"], "false", "not_a_boolean"),
    ],
)
def test_numbers_and_ids_are_bounded(path: list[Any], value: Any, reason: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        node: Any = d
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    assert errors(seed(mutate))[0][1] == reason


def test_a_key_given_twice_is_an_error_not_the_last_one_winning() -> None:
    text = json.dumps(SEED)[:-1] + ', "mode": "observe"}'
    assert text_errors(PARSERS["schedule"], text) == [("mode", "duplicate_key")]
    assert text_errors(PARSERS["schedule"], "name: a\nname: b\n")[0] == ("name", "duplicate_key")


def test_nan_is_not_json() -> None:
    assert text_errors(PARSERS["pool"], '{"name": NaN}') == [
        ("name", "invalid_json"),
        ("nodes", "missing"),
    ]


def _yaml(doc: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_issue_25_6_parse_level_refusals_have_their_paths_and_the_rest_is_validated(
    syntax: str,
) -> None:
    """Four parse-level problems and three field errors in one file: all, each at its path."""
    doc = copy.deepcopy(SEED)
    doc["timezone"] = "Mars/Olympus"  # a field error
    doc["windows"][0]["priority"] = "@BIG@"
    doc["windows"][1]["duration"] = "@NAN@"
    doc["targets"][0]["default_state"] = "@DEEP@"
    doc["windows"][0]["replicas_typo"] = 1  # a field error
    text = json.dumps(doc) if syntax == "json" else _yaml(doc)
    nan = "NaN" if syntax == "json" else ".nan"
    text = (
        text.replace('"@BIG@"', "9" * 40)
        .replace("'@BIG@'", "9" * 40)
        .replace('"@NAN@"', nan)
        .replace("'@NAN@'", nan)
        .replace('"@DEEP@"', "[" * 40 + "]" * 40)
        .replace("'@DEEP@'", "[" * 40 + "]" * 40)
    )
    dup = '"name": "first", ' if syntax == "json" else "name: first\n"  # then the seed's own
    text = "{" + dup + text.lstrip()[1:] if syntax == "json" else dup + text
    found = text_errors(PARSERS["schedule"], text)
    nan_reason = "invalid_json" if syntax == "json" else "not_finite"
    assert sorted(found) == sorted(
        [
            ("name", "duplicate_key"),
            ("timezone", "unknown_timezone"),
            ("targets[0].default_state" + "[0]" * 29, "too_deep"),
            ("targets[0].default_state", "invalid_value"),  # and a list is not a state anyway
            ("windows[0].priority", "number_too_long"),
            ("windows[0].replicas_typo", "unknown_field"),
            ("windows[1].duration", nan_reason),
        ]
    )


# -- messages -------------------------------------------------------------------------------------


@pytest.mark.parametrize("digit", ["８", "²", "٣"])
def test_a_non_ascii_digit_in_a_cron_is_invalid_cron_not_a_raw_value_error(digit: str) -> None:
    with pytest.raises(SpecInvalid) as info:
        load_schedule(seed(window0("cron", f"0 {digit} * * 1-5")))
    assert info.value.reasons == ("invalid_cron",)
    assert "is not a valid hour" in info.value.errors[0].fix


def test_a_trailing_year_field_is_named_a_year_not_seconds() -> None:
    with pytest.raises(SpecInvalid) as info:
        load_schedule(seed(window0("cron", "0 8 * * 1-5 2026")))
    fix = info.value.errors[0].fix
    assert info.value.reasons == ("cron_six_fields",) and "year" in fix and "seconds" not in fix
    with pytest.raises(SpecInvalid) as info:
        load_schedule(seed(window0("cron", "0 0 8 * * 1-5")))
    assert "drop the first (seconds) field" in info.value.errors[0].fix


def test_fix_texts_echoing_user_values_stay_on_one_line() -> None:
    with pytest.raises(SpecInvalid) as info:
        load_schedule({**SEED, "timezone": "Bad\nZone\x1b[31m", "colour\nred": 1})
    lines = str(info.value).splitlines()
    assert len(lines) == 1 + len(info.value.errors)
    assert any("'Bad\\nZone\\x1b[31m'" in e.fix for e in info.value.errors)
    assert any(e.path == "colour\\nred" for e in info.value.errors)


# -- bounded work ---------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [MAX_WINDOWS + 1, 24_000])
def test_thousands_of_equal_priority_windows_are_refused_with_a_clear_error(count: int) -> None:
    """Pairwise checks were quadratic (24k windows: over 2 min); now the count is bounded first."""
    windows = [
        {**SEED["windows"][0], "name": f"w{i}", "cron": f"{i % 60} 8 * * 1-5", "duration": "1m"}
        for i in range(count)
    ]
    with pytest.raises(SpecInvalid) as info:
        load_schedule({**SEED, "windows": windows})
    assert [(e.path, e.reason) for e in info.value.errors] == [("windows", "too_many_windows")]
    assert str(count) in info.value.errors[0].fix


def test_the_largest_schedule_allowed_validates() -> None:
    """MAX_WINDOWS equal-priority windows that disagree and never meet: every pair is compared."""
    windows = [
        {
            **SEED["windows"][0],
            "name": f"w{i}",
            "cron": f"{i % 60} {i // 60} * * *",
            "duration": "1m",
            "states": [
                {
                    "model_deploy_id": "md-llama70b",
                    "desired_state": "running" if i % 2 else "stopped",
                }
            ],
        }
        for i in range(MAX_WINDOWS)
    ]
    assert len(load_schedule({**SEED, "windows": windows}).windows) == MAX_WINDOWS


# -- pools and reservations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "path", "reason"),
    [
        (lambda d: d["nodes"][0].__setitem__("gpus", "8"), "nodes[0].gpus", "not_an_integer"),
        (lambda d: d["nodes"][0].__setitem__("gpus", 10**9), "nodes[0].gpus", "too_large"),
        (lambda d: d["deploys"][0].__setitem__("hpa", "yes"), "deploys[0].hpa", "not_a_boolean"),
        (
            lambda d: d["deploys"][0].__setitem__("replicas", 2.0),
            "deploys[0].replicas",
            "not_an_integer",
        ),
        (
            lambda d: d.__setitem__("sim", {"timings": {"stop_grace_s": float("inf")}}),
            "sim.timings.stop_grace_s",
            "not_finite",
        ),
        (
            lambda d: d.__setitem__("sim", {"timings": {"start_delay_s": 10**9}}),
            "sim.timings.start_delay_s",
            "too_large",
        ),
    ],
)
def test_pool_documents_are_strict_and_bounded(
    mutate: Callable[[dict[str, Any]], None], path: str, reason: str
) -> None:
    doc = copy.deepcopy(POOL)
    mutate(doc)
    with pytest.raises(SpecInvalid) as info:
        load_pool(doc)
    assert [(e.path, e.reason) for e in info.value.errors] == [(path, reason)]


def test_reservation_documents_are_strict() -> None:
    text = RESERVATION.replace("gpu_memory_mib: 143771", 'gpu_memory_mib: "143771"')
    assert text != RESERVATION
    assert text_errors(PARSERS["reservation"], text) == [("gpu_memory_mib", "not_an_integer")]
