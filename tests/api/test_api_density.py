"""Issue 21 items 2 and 4 against a live server (uvicorn on loopback, in this process).

Item 2: the worst schedules validation accepts cost at most ``WORK_BUDGET`` evaluator units
per ``:dry-run``, ``/timeline`` and engine pass (counted by ``occurrences.total_units``, which
counts the server's worker threads too) and less than 50 MB; one step denser is refused at
create with ``schedule_too_dense``. Item 4: a non-ASCII digit in If-Match is a 400, not a 500.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_support import ADMIN, Api, make_api
from live_server import serving

from gps_dagster.domain.occurrences import WORK_BUDGET, total_units

MB = 1024 * 1024
TARGETS = ("md-llama70b", "md-qwen32b")


def dense(name: str, windows: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "name": name,
        "timezone": "America/New_York",
        "targets": [
            {"model_deploy_id": t, "default_state": "stopped", "default_allow_downtime": True}
            for t in TARGETS
        ],
        "windows": [
            {
                "name": f"w{i}",
                "kind": "recurring",
                "priority": i + 1,
                "cron": cron,
                "duration": dur,
                "states": [
                    {"model_deploy_id": TARGETS[0], "desired_state": "running"},
                    {"model_deploy_id": TARGETS[1], "desired_state": "stopped"},
                ],
            }
            for i, (cron, dur) in enumerate(windows)
        ],
    }


WORST = {
    "every-minute-x200": [("* * * * *", "1m")] * 200,  # the attack, back-to-back
    "every-3-minutes": [
        ("*/3 * * * *", "1m")
    ],  # two targets: the densest accepted (not back-to-back)
}


@pytest.fixture
def live(sqlite_url: str) -> Iterator[tuple[Api, httpx.Client]]:
    api = make_api(sqlite_url)
    with serving(api.client.app) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield api, http
    api.client.close()
    api.services.store.engine.dispose()


def _cost(call: Any) -> tuple[Any, int, int]:
    """(result, evaluator units, peak traced bytes) of one call."""
    tracemalloc.start()
    try:
        before = total_units()
        result = call()
        return result, total_units() - before, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", sorted(WORST))
def test_the_worst_accepted_schedules_cost_a_bounded_dry_run_timeline_and_pass(
    live: tuple[Api, httpx.Client], name: str
) -> None:
    api, http = live
    admin = api.as_("admin")
    created = http.post(ADMIN, json=dense(name, WORST[name]), headers=admin)
    assert created.status_code == 201, created.text
    calls = {
        ":dry-run": lambda: http.post(f"{ADMIN}/{name}:dry-run", json={}, headers=admin),
        "/timeline": lambda: http.get(f"{ADMIN}/{name}/timeline", headers=admin),
        ":dry-run range": lambda: http.post(
            f"{ADMIN}/{name}:dry-run",
            headers=admin,
            json={"from": "2026-10-21T00:00:00+07:00", "to": "2026-10-28T00:00:00+07:00"},
        ),
    }
    for what, call in calls.items():
        response, units, peak = _cost(call)
        assert response.status_code == 200, (what, response.text)
        limit = 4 * WORK_BUDGET if what == ":dry-run range" else WORK_BUDGET
        assert 0 < units <= limit, (what, units)
        assert peak < 50 * MB, (what, peak)
    body = calls["/timeline"]().json()
    assert set(body["targets"]) == set(TARGETS)
    api.services.store.set_gate("observe", now=api.clock.now())
    report, units, peak = _cost(lambda: api.services.engine.run_pass(schedule=name))
    assert report is not None and 0 < units <= 2 * WORK_BUDGET and peak < 50 * MB


def test_one_step_denser_is_refused_at_create_and_nothing_is_stored(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    refused = http.post(
        ADMIN, json=dense("too-dense", [("*/2 * * * *", "1m")] * 2), headers=api.as_("admin")
    )
    assert refused.status_code == 422, refused.text
    (problem,) = [e for e in refused.json()["errors"] if e["reason"] == "schedule_too_dense"]
    assert problem["path"] == "windows" and "fire less often" in problem["fix"]
    assert api.services.store.find_schedule("too-dense") is None


def test_a_timeline_longer_than_the_schedule_can_afford_is_refused_with_the_limit(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    admin = api.as_("admin")
    assert (
        http.post(ADMIN, json=dense("dense", WORST["every-3-minutes"]), headers=admin).status_code
        == 201
    )
    month = http.get(
        f"{ADMIN}/dense/timeline",
        headers=admin,
        params={"from": "2026-10-01T00:00:00+00:00", "to": "2026-10-31T00:00:00+00:00"},
    )
    assert month.status_code == 400 and month.json()["reason"] == "range_too_long"
    assert "at most" in month.json()["fix"]


@pytest.mark.parametrize("header", ['"²"', '"٣"', 'W/"1²"', '"99999999999999999999"'])
@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_a_non_ascii_or_huge_if_match_is_400_not_500(
    live: tuple[Api, httpx.Client], header: str, method: str
) -> None:
    api, http = live
    admin = api.as_("admin")
    assert (
        http.post(ADMIN, json=dense("m", WORST["every-3-minutes"]), headers=admin).status_code
        == 201
    )
    try:  # on the wire as the server reads it: '²' is one latin-1 byte, '٣' two UTF-8 bytes
        raw = header.encode("latin-1")
    except UnicodeEncodeError:
        raw = header.encode("utf-8")
    encoded = {"If-Match": raw}
    body = dense("m", WORST["every-3-minutes"]) if method == "PUT" else None
    answer = http.request(method, f"{ADMIN}/m", json=body, headers={**admin, **encoded})
    assert answer.status_code == 400, answer.text
    assert answer.json()["reason"] == "invalid_if_match"
    assert api.services.store.find_schedule("m").version == 1


EDGES = [
    "0001-01-01T00:00:00+00:00",
    "0001-01-01T12:00:00+14:00",
    "9999-12-31T23:59:59+00:00",
    "9999-12-31T00:00:00-12:00",
]


@pytest.mark.parametrize("edge", EDGES)
def test_instants_near_year_1_or_9999_are_a_400_or_422_not_a_500(
    sqlite_url: str, edge: str
) -> None:
    """Issue 21 item 5: :dry-run (instant and range), /timeline, :admission-check."""
    import json
    from datetime import datetime

    from api_support import ROOT

    gpu42 = ROOT / "examples"
    api = make_api(
        sqlite_url,
        pool=gpu42 / "gpu42-pool.yaml",
        start=datetime.fromisoformat("2026-10-19T10:00:00+07:00"),
    )
    schedule = json.loads((gpu42 / "gpu42-schedule.json").read_text())
    del schedule["scope"]
    vision = "/api/v1/cmp/projects/vision"
    api.tokens["vision"] = api.services.tokens.create(
        "vision", "cmp:vision", now=api.clock.now(), actor="t"
    )[1]
    assert (
        api.call("vision", "POST", f"{vision}/deploy-schedules", json=schedule).status_code == 201
    )
    one = f"{vision}/deploy-schedules/{schedule['name']}"
    near = "2026-10-19T10:00:00+07:00"
    probes = [
        ("POST", f"{one}:dry-run", {"json": {"at": edge}}),
        ("POST", f"{one}:dry-run", {"json": {"from": edge, "to": near}}),
        ("POST", f"{one}:dry-run", {"json": {"from": near, "to": edge}}),
        ("GET", f"{one}/timeline", {"params": {"from": edge}}),
        ("GET", f"{one}/timeline", {"params": {"from": near, "to": edge}}),
        (
            "POST",
            f"{vision}/reservations/rsv-gpu42-shared:admission-check",
            {
                "json": {
                    "deploy_id": "md-vision-chat",
                    "memory_mib": 1,
                    "at": edge,
                    "schedule": schedule["name"],
                }
            },
        ),
    ]
    for method, path, kw in probes:
        answer = api.call("vision", method, path, **kw)
        assert answer.status_code in (400, 422), (path, kw, answer.text)
        body = answer.json()
        reasons = {body["reason"], *(e["reason"] for e in body["errors"])}
        assert "instant_out_of_range" in reasons, (path, kw, body)
        assert "1970-01-01" in answer.text
    api.client.close()
