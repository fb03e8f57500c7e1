"""The CLI over holiday calendars (R-NEXT-2): validate by field, timeline JSON/PNG, dry-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gps_dagster.domain.calendars import PACKAGE
from tests.cli.cli_support import run

ROOT = Path(__file__).parents[2]
HOLIDAY = str(ROOT / "examples" / "holiday-schedule.json")
POOL10 = str(ROOT / "examples" / "seed-pool-10.yaml")
NATIONAL_DAY_WEEK = ["--from", "2026-08-31T00:00:00+07:00", "--to", "2026-09-07T00:00:00+07:00"]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPS_DB_URL", f"sqlite:///{tmp_path / 'gps.sqlite'}")
    monkeypatch.setenv("GPS_POOL_FILE", POOL10)
    return tmp_path


def test_validate_refuses_an_unknown_subdivision_by_field_with_the_fix(tmp_path: Path) -> None:
    doc = json.loads(Path(HOLIDAY).read_text())
    doc["windows"][0]["skip"]["holidays"]["subdivision"] = "XX"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    result = run("validate", str(path), "--format", "json")
    assert result.exit_code == 1
    [error] = json.loads(result.output)["errors"]
    assert (error["path"], error["reason"]) == (
        "windows[0].skip.holidays.subdivision",
        "unknown_subdivision",
    )
    assert "Traceback" not in result.output


def test_timeline_json_lists_the_skipped_days_and_the_png_is_drawn(tmp_path: Path) -> None:
    png = tmp_path / "week.png"
    result = run(
        "timeline",
        HOLIDAY,
        *NATIONAL_DAY_WEEK,
        "--pool",
        POOL10,
        "--format",
        "json",
        "--png",
        str(png),
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[: result.output.rindex("}") + 1])
    assert [(k["date"], k["reason"], k["decided_by"]) for k in doc["skipped"]] == [
        ("2026-08-31", "Day off (substituted from 08/22/2026)", PACKAGE),
        ("2026-09-01", "National Day", PACKAGE),
        ("2026-09-02", "National Day", PACKAGE),
    ]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = run("timeline", HOLIDAY, *NATIONAL_DAY_WEEK).output
    assert "skipped occurrences" in table and "National Day" in table


def test_dry_run_on_national_day_plans_nothing_and_says_why(env: Path) -> None:
    result = run("dry-run", HOLIDAY, "--at", "2026-09-02T10:00:00+07:00", "--format", "json")
    assert result.exit_code == 0, result.output
    rep = json.loads(result.output)
    assert rep["steps"] == []  # the pool holds A stopped, B running: the holiday keeps it so
    assert rep["intents"]["md-llama70b"]["source"] == "default"
    assert rep["intents"]["md-llama70b"]["skipped"] == [
        f"business-hours skipped on 2026-09-02: National Day ({PACKAGE})"
    ]
    text = run("dry-run", HOLIDAY, "--at", "2026-09-02T10:00:00+07:00").output
    assert "business-hours skipped on 2026-09-02: National Day" in text
    workday = json.loads(
        run("dry-run", HOLIDAY, "--at", "2026-09-03T10:00:00+07:00", "--format", "json").output
    )
    assert {(s["target"], s["step"]) for s in workday["steps"]} == {
        ("md-qwen32b", "stop"),
        ("md-llama70b", "start"),
    }
