"""Every CLI command that reads a user document exits 1 on hostile input, never a traceback.

Run through the console entry point (``main``) in-process, as a user's shell
would: an exception that escapes it fails the test with its traceback.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.cli.main import main

ROOT = Path(__file__).parents[2]
SEED = str(ROOT / "examples" / "seed-schedule.json")
POOL10 = str(ROOT / "examples" / "seed-pool-10.yaml")
DAY = ["--from", "2026-10-19T06:00:00+07:00", "--to", "2026-10-19T10:00:00+07:00"]
AT = ["--at", "2026-10-19T09:00:00+07:00"]


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPS_DB_URL", f"sqlite:///{tmp_path / 'gps.sqlite'}")
    monkeypatch.setenv("GPS_POOL_FILE", POOL10)
    monkeypatch.delenv("GPS_DAGSTER_URL", raising=False)


def console(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out.out + out.err


def seed_with(mutate: Any) -> str:
    doc = json.loads(Path(SEED).read_text())
    mutate(doc)
    return json.dumps(doc)


HOSTILE_SCHEDULES = {
    "overflowing_duration": (
        seed_with(lambda d: d["windows"][0].__setitem__("duration", "9999999999d")),
        "duration_too_long",
    ),
    "nesting_1500_deep": ('{"name": ' + "[" * 1500 + "]" * 1500 + "}", "too_deep"),
    "integer_of_5000_digits": ('{"name": ' + "9" * 5000 + "}", "number_too_long"),
    "one_shot_in_year_one": (
        seed_with(
            lambda d: d["windows"][1].update(
                active_from="0001-01-01T00:00:00+07:00", active_until="0001-01-02T00:00:00+07:00"
            )
        ),
        "instant_out_of_range",
    ),
    "maint_wed_at_priority_10": (
        seed_with(lambda d: d["windows"][1].__setitem__("priority", 10)),
        "ambiguous_priority",
    ),
}
HOSTILE_POOLS = {
    "nesting_1500_deep": ("name: " + "[" * 1500 + "]" * 1500 + "\n", "too_deep"),
    "integer_of_5000_digits": (
        "name: p\nnodes:\n  - {name: n1, gpus: " + "9" * 5000 + "}\n",
        "number_too_long",
    ),
    "gpus_as_text": (Path(POOL10).read_text().replace("gpus: 8,", 'gpus: "8",'), "not_an_integer"),
    "infinite_timing": (
        Path(POOL10).read_text().replace("stop_grace_s: 30", "stop_grace_s: .inf"),
        "not_finite",
    ),
}
SCHEDULE_COMMANDS = {
    "validate": lambda f: ["validate", f],
    "timeline": lambda f: ["timeline", f, *DAY],
    "simulate": lambda f: ["simulate", f, "--pool", POOL10, *DAY],
    "schedules_apply": lambda f: ["schedules", "apply", "-f", f],
    "dry_run": lambda f: ["dry-run", f, *AT],
}
POOL_COMMANDS = {
    "timeline": lambda p: ["timeline", SEED, *DAY, "--pool", p],
    "simulate": lambda p: ["simulate", SEED, "--pool", p, *DAY],
    "pool_show": lambda p: ["pool", "show", "--pool", p],
    "schedules_apply": lambda p: ["schedules", "apply", "-f", SEED, "--pool", p],
    "dry_run": lambda p: ["dry-run", SEED, *AT, "--pool", p],
}


@pytest.mark.parametrize("command", sorted(SCHEDULE_COMMANDS))
@pytest.mark.parametrize("case", sorted(HOSTILE_SCHEDULES))
def test_hostile_schedule_files_exit_1_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, case: str
) -> None:
    text, reason = HOSTILE_SCHEDULES[case]
    path = tmp_path / "schedule.json"
    path.write_text(text)
    code, out = console(capsys, *SCHEDULE_COMMANDS[command](str(path)))
    assert (code, reason in out, "Traceback" in out) == (1, True, False), out[-2000:]


@pytest.mark.parametrize("command", sorted(POOL_COMMANDS))
@pytest.mark.parametrize("case", sorted(HOSTILE_POOLS))
def test_hostile_pool_files_exit_1_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, case: str
) -> None:
    text, reason = HOSTILE_POOLS[case]
    assert text != Path(POOL10).read_text()
    path = tmp_path / "pool.yaml"
    path.write_text(text)
    code, out = console(capsys, *POOL_COMMANDS[command](str(path)))
    assert (code, reason in out, "Traceback" in out) == (1, True, False), out[-2000:]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("id: " + "[" * 1500 + "]" * 1500 + "\n", "too_deep"),
        (
            (ROOT / "examples" / "gpu42-reservation.yaml")
            .read_text()
            .replace("143771", "9" * 5000),
            "number_too_long",
        ),
    ],
)
def test_hostile_reservation_files_exit_1_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "rsv.yaml"
    path.write_text(text)
    code, out = console(capsys, "reservations", "create", "-f", str(path))
    assert (code, reason in out, "Traceback" in out) == (1, True, False), out[-2000:]


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00+07:00", "9999-12-31T00:00:00+00:00"])
def test_timeline_range_outside_the_sane_instants_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], instant: str
) -> None:
    code, out = console(
        capsys, "timeline", SEED, "--from", instant, "--to", "9999-12-31T23:00:00+00:00"
    )
    assert code == 2 and "is outside 1970-01-01 .. 9000-01-01" in out and "Traceback" not in out


def test_a_fix_text_with_a_newline_is_printed_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = copy.deepcopy(json.loads(Path(SEED).read_text()))
    doc["timezone"] = "Asia/Ho_Chi_Minh\nFAKE: ok — forged line"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    code, out = console(capsys, "validate", str(path))
    assert code == 1
    assert [line for line in out.splitlines() if "forged" in line] == [
        "  timezone: unknown_timezone — 'Asia/Ho_Chi_Minh\\nFAKE: ok — forged line' is not "
        "an IANA time zone; "
        "use e.g. Asia/Ho_Chi_Minh"
    ]


def test_issue_25_6_a_file_with_parse_level_problems_lists_each_at_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A key given twice, a 40-digit integer, NaN, a 40-deep list and an unknown zone: one run
    of ``validate`` prints all five, each with its field path, and no traceback."""
    doc = json.loads(Path(SEED).read_text())
    doc["timezone"] = "Mars/Olympus"
    doc["windows"][0]["priority"] = "@BIG@"
    doc["windows"][1]["duration"] = "@NAN@"
    doc["targets"][0]["default_state"] = "@DEEP@"
    text = ('{"name": "first", ' + json.dumps(doc)[1:]).replace('"@BIG@"', "9" * 40)
    text = text.replace('"@NAN@"', "NaN").replace('"@DEEP@"', "[" * 40 + "]" * 40)
    path = tmp_path / "schedule.json"
    path.write_text(text)
    code, out = console(capsys, "validate", str(path))
    assert code == 1 and "Traceback" not in out, out
    for field, reason in [
        ("name", "duplicate_key"),
        ("windows[0].priority", "number_too_long"),
        ("windows[1].duration", "invalid_json"),
        ("targets[0].default_state" + "[0]" * 29, "too_deep"),
        ("timezone", "unknown_timezone"),
    ]:
        assert any(field in line and reason in line for line in out.splitlines()), (field, out)
