"""The sensors' cursors and the stopped-sensor rule, without Dagster (``engine/tick_cursors.py``,
``engine/sensor_health.py``): what the Dagster layer only reads from the instance and shows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gps_dagster.engine import sensor_health as health
from gps_dagster.engine.tick_cursors import (
    ReconcileCursor,
    dump_boundary_cursor,
    dump_seen,
    parse_boundary_cursor,
    parse_seen,
)

AT = datetime(2026, 10, 19, 8, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parents[2] / "gps_dagster" / "examples"


def test_the_reconcile_cursor_reads_back_what_it_wrote_and_an_empty_one_starts_over() -> None:
    cursor = ReconcileCursor(after="s2", seen={"a": 3}, automation="")
    assert ReconcileCursor.parse(cursor.dump()) == cursor
    assert ReconcileCursor.parse(None) == ReconcileCursor()
    assert ReconcileCursor.parse('{"after": "x"}') == ReconcileCursor(after="x")


def test_the_boundary_cursor_reads_a_bare_instant_as_nothing_reported() -> None:
    assert parse_boundary_cursor(AT.isoformat()) == (AT, None)
    assert parse_boundary_cursor(dump_boundary_cursor(AT, "w")) == (AT, "w")
    assert parse_boundary_cursor(dump_boundary_cursor(AT, "")) == (AT, None)
    assert parse_boundary_cursor(None) == (None, None)
    assert parse_seen(dump_seen({"r1": "d"})) == {"r1": "d"} and parse_seen("") == {}


def test_a_sensor_is_off_when_stored_stopped_or_declared_off_and_not_started() -> None:
    declared = {health.RECONCILE: False, health.CAPACITY_WAIT: True, health.PREARM: False}
    assert health.stopped({}, declared) == [health.CAPACITY_WAIT]
    assert health.stopped({health.CAPACITY_WAIT: "RUNNING"}, declared) == []
    stored = {health.RECONCILE: "STOPPED", health.BOUNDARY: "STOPPED"}
    assert health.stopped(stored, declared) == [health.RECONCILE, health.CAPACITY_WAIT]


def test_the_stand_in_reports_only_a_stopped_reconcile_or_its_all_clear() -> None:
    assert health.reports([health.PREARM], None, stand_in=False)
    assert not health.reports([health.PREARM], None, stand_in=True)
    assert health.reports([health.RECONCILE], None, stand_in=True)
    assert health.reports([], "reconcile was stopped", stand_in=True)


def test_the_warning_names_the_waiting_deploys_and_the_fix() -> None:
    text = health.warning_text([health.CAPACITY_WAIT], ["b", "a", "a"])
    assert "(waiting for capacity now: a, b)" in text
    assert text.endswith(f"`dagster sensor start {health.CAPACITY_WAIT}`)")
    assert health.check_text("") == "every GPS sensor is on"


def test_the_pre_arm_lead_is_the_setting_else_measured_else_the_default() -> None:
    from gps_dagster.engine import prearm

    assert prearm.lead_s(0.0, lambda: 99.0) == 0.0
    assert prearm.lead_s(45, None) == 45.0
    assert prearm.lead_s(None, lambda: 99.0) == 99.0
    assert prearm.lead_s(None, None) == prearm.DEFAULT_LEAD_S
    assert prearm.run_key("s", AT) == "prearm:s:2026-10-19T08:00:00+00:00"


def test_the_schedules_and_sensors_skip_reasons_say_what_was_served() -> None:
    from gps_dagster.engine import ticks

    assert ticks.boundary_skip(["a: 1 plan(s)", "b"]) == "nothing to launch: a: 1 plan(s); b"
    assert ticks.minute_skip(["nothing due"], []) == "nothing due. Next: none"
    assert ticks.minute_skip(["x"], [(AT, "s")]) == f"x. Next: s at {AT.isoformat()}"
    assert ticks.edge_skip(["k: launched by o"], None) == "no transition to run (k: launched by o)"
    assert ticks.edge_skip([], "not an edge") == "no transition to run (not an edge)"
    assert ticks.edge_skip([], None).endswith("(intent unchanged or already processed)")
    assert ticks.apply_now_skip([]) == "no apply-now request"
    assert ticks.apply_now_skip(["#1 s: no change", "#2"]) == "#1 s: no change; #2"


def test_a_schedule_folder_is_read_all_or_nothing(tmp_path: Path) -> None:
    from gps_dagster.engine import schedule_folder as folder

    with pytest.raises(folder.FolderInvalid, match="is not a folder"):
        folder.parse_folder(tmp_path / "missing")
    seed = next(p for p in EXAMPLES.iterdir() if p.name.endswith(".json") and "schedule" in p.name)
    (tmp_path / "a.json").write_text(seed.read_text())
    (tmp_path / "notes.txt").write_text("not a schedule")
    assert [p.name for p, _ in folder.parse_folder(tmp_path)] == ["a.json"]
    (tmp_path / "b.yaml").write_text("name: [")
    with pytest.raises(folder.FolderInvalid, match=r"^schedule_dir: "):
        folder.parse_folder(tmp_path)
