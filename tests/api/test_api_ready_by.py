"""The schedule API over ready-by (R-NEXT-1): timeline leads and a dry-run inside a lead."""

from __future__ import annotations

from datetime import datetime

from api_support import ADMIN, make_api, seed

ONE = f"{ADMIN}/gpu-pool-h100-shared"
A, B = "md-llama70b", "md-qwen32b"


def test_the_timeline_and_a_dry_run_inside_the_lead_show_the_early_start(sqlite_url: str) -> None:
    api = make_api(sqlite_url, start=datetime.fromisoformat("2026-10-19T07:00:00+07:00"))
    doc = seed()
    doc["targets"][0]["ready_by"] = True
    assert api.call("admin", "POST", ADMIN, json=doc).status_code == 201
    body = api.call(
        "admin",
        "GET",
        f"{ONE}/timeline",
        params={"from": "2026-10-19T00:00:00+07:00", "to": "2026-10-20T00:00:00+07:00"},
    ).json()
    [lead] = body["ready_by"]
    # no start observed yet: the engine's defaults (start 300 s + stop 60 s)
    assert (lead["boundary"], lead["early_start"], lead["lead_s"]) == (
        "2026-10-19T08:00:00+07:00",
        "2026-10-19T07:54:00+07:00",
        360.0,
    )
    assert lead["start_s"][A]["source"] == "default" and lead["releasing"] == [B]
    inside = api.call(
        "admin", "POST", f"{ONE}:dry-run", json={"at": "2026-10-19T07:55:00+07:00"}
    ).json()
    rep = inside["instant"]
    assert rep["intents"][A]["desired_state"] == "running"  # planned as of 08:00
    assert rep["intents"][A]["interval_start"] == "2026-10-19T08:00:00+07:00"
    assert rep["ready_by"][0]["in_force"] is True
    before = api.call(
        "admin", "POST", f"{ONE}:dry-run", json={"at": "2026-10-19T07:53:00+07:00"}
    ).json()
    assert before["instant"]["intents"][A]["desired_state"] == "stopped"
    assert "in_force" not in before["instant"]["ready_by"][0]
