"""Issue 21 item 6: "decided by" names the window in force at a hand-over of equal intents.

``early`` (p10, 08-09) and ``late`` (p20, 09-10) both want A running: the intent does not
change at 09:00, so the engine keeps one interval 08-10, but at 09:30 the timeline, the
dry-run and the page must say ``late`` (R-EVAL-1: the highest-priority window active then).
"""

from __future__ import annotations

from datetime import datetime

from api_support import ADMIN, Api

from gps_dagster.domain.evaluator import intervals
from gps_dagster.domain.schedules import load_schedule

DOC = {
    "name": "handover",
    "timezone": "UTC",
    "targets": [
        {
            "model_deploy_id": "md-llama70b",
            "default_state": "stopped",
            "default_allow_downtime": True,
        }
    ],
    "windows": [
        {
            "name": name,
            "kind": "recurring",
            "priority": p,
            "cron": cron,
            "duration": "1h",
            "states": [{"model_deploy_id": "md-llama70b", "desired_state": "running"}],
        }
        for name, p, cron in (("early", 10, "0 8 * * *"), ("late", 20, "0 9 * * *"))
    ],
}
DAY = ("2026-10-21T00:00:00+00:00", "2026-10-22T00:00:00+00:00")


def test_the_timeline_splits_at_the_hand_over_and_the_engine_keeps_one_interval(api: Api) -> None:
    assert api.call("admin", "POST", ADMIN, json=DOC).status_code == 201
    body = api.call(
        "admin", "GET", f"{ADMIN}/handover/timeline", params={"from": DAY[0], "to": DAY[1]}
    ).json()
    rows = [(r["start"], r["source"]) for r in body["targets"]["md-llama70b"]]
    assert rows == [
        ("2026-10-21T00:00:00+00:00", "default"),
        ("2026-10-21T08:00:00+00:00", "early"),
        ("2026-10-21T09:00:00+00:00", "late"),
        ("2026-10-21T10:00:00+00:00", "default"),
    ]
    merged = intervals(
        load_schedule(DOC), datetime.fromisoformat(DAY[0]), datetime.fromisoformat(DAY[1])
    )
    assert [r.start.hour for r in merged["md-llama70b"]] == [0, 8, 10]  # identity = the intent's


def test_the_dry_run_at_half_past_nine_is_decided_by_late(api: Api) -> None:
    assert api.call("admin", "POST", ADMIN, json=DOC).status_code == 201
    ran = api.call(
        "admin", "POST", f"{ADMIN}/handover:dry-run", json={"at": "2026-10-21T09:30:00+00:00"}
    )
    assert ran.status_code == 200, ran.text
    intent = ran.json()["instant"]["intents"]["md-llama70b"]
    assert (intent["source"], intent["desired_state"]) == ("late", "running")
    assert (
        intent["interval_start"] == "2026-10-21T08:00:00+00:00"
    )  # the engine's interval stays merged
