"""The sensors' cursors and the stopped-sensor rule, without Dagster (``engine/tick_cursors.py``,
``engine/sensor_health.py``): what the Dagster layer only reads from the instance and shows."""

from __future__ import annotations

from datetime import UTC, datetime

from gps_dagster.engine import sensor_health as health
from gps_dagster.engine.tick_cursors import (
    ReconcileCursor,
    dump_boundary_cursor,
    dump_seen,
    parse_boundary_cursor,
    parse_seen,
)

AT = datetime(2026, 10, 19, 8, tzinfo=UTC)


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
