"""A deploy's status as an operator reads it (``engine/status_views.py``), without Dagster: a
terminal phase is an error, drift a warning, anything else nothing wrong; the figures and the
intent line of the asset's metadata."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gps_dagster.engine import status_views
from gps_dagster.store.records import TargetStatusRow

AT = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
ROW = TargetStatusRow(
    schedule="seed",
    deploy_id="md-a",
    phase="converged",
    reason=None,
    fix=None,
    detail=None,
    status_version=3,
    target_generation=1,
    schedule_version=1,
    interval_start=AT,
    interval_end=None,
    intent={"desired_state": "running", "replicas": 2, "source": "business_hours"},
    transition_id=None,
    last_action=None,
    phase_since=AT,
    converged_at=AT,
    updated_at=AT,
)


def test_a_terminal_phase_is_an_error_drift_a_warning_the_rest_nothing_wrong() -> None:
    assert status_views.level("converged") is None
    assert status_views.level("quota_refused") == "error"
    assert status_views.level("drift_detected") == "warn"
    ok = status_views.verdict(ROW)
    assert ok.passed and ok.description == "converged: nothing wrong"
    drift = status_views.verdict(replace(ROW, phase="drift_detected"))
    assert drift.level == "warn"
    assert drift.description == "drift_detected: changed by hand — respected, not reverted"
    refused = replace(ROW, phase="quota_refused", reason="quota", fix="raise it")
    bad = status_views.verdict(refused)
    assert not bad.passed and bad.description == "quota_refused (quota): raise it"
    assert bad.metadata == {"phase": "quota_refused", "reason": "quota", "fix": "raise it"}
    assert status_views.headline(refused) == "quota_refused (quota)"


def test_the_metadata_says_the_interval_and_the_intent_followed() -> None:
    meta = status_views.status_metadata(ROW)
    assert meta["intent"] == "running ×2 (source business_hours)"
    assert meta["interval"] == f"{AT.isoformat()} → "
    assert meta["status_version"] == 3
    assert status_views.intent_text(replace(ROW, intent=None)) == ""
