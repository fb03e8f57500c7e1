"""Contract of the rest of the API: errors, limits, reservations, audit, the OpenAPI document,
login."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from api_support import ADMIN, ROOT, Api, make_api, seed, tenant_base

from gps_dagster.api import Limits

NAME = "gpu-pool-h100-shared"
GPU42 = ROOT / "examples"
RESERVATION = {
    "id": "rsv-alpha",
    "node": "cmp-01",
    "gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3"],
    "namespace": "cmp-alpha",
    "mode": "time_sliced",
    "gpu_memory_mib": 143771,
    "headroom": 0.95,
}


def test_the_served_openapi_document_is_the_checked_in_one(api: Api) -> None:
    served = api.client.get("/openapi.json").json()
    checked_in = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert served == checked_in, "docs/openapi.json is stale: run .venv/bin/python tools/openapi.py"
    ops = {op["operationId"] for path in served["paths"].values() for op in path.values()}
    assert {
        "admin_create",
        "tenant_apply_now",
        "tenant_dry_run",
        "admin_audit",
        "tenant_admission_check",
    } <= ops


def test_an_unexpected_failure_is_a_generic_500_and_the_trace_stays_in_the_log(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    api.call("admin", "POST", ADMIN, json=seed())

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("secret-internal-detail")

    monkeypatch.setattr(api.services.store, "list_status", broken)
    with caplog.at_level(logging.ERROR, logger="gps_dagster.api"):
        answer = api.call("admin", "GET", f"{ADMIN}/{NAME}/status")
    assert answer.status_code == 500
    body = answer.json()
    assert body["reason"] == "internal_error" and body["request_id"] in body["fix"]
    assert "secret-internal-detail" not in answer.text and "Traceback" not in answer.text
    assert "secret-internal-detail" in caplog.text and body["request_id"] in caplog.text


def test_unknown_routes_and_methods_answer_in_the_error_shape(api: Api) -> None:
    missing = api.call("admin", "GET", "/admin/nothing-here")
    assert missing.status_code == 404 and missing.json()["reason"] == "not_found"
    wrong = api.call("admin", "PATCH", ADMIN)
    assert wrong.status_code == 405 and wrong.json()["reason"] == "method_not_allowed"


def test_a_body_over_the_limit_is_413_with_a_fix(sqlite_url: str) -> None:
    api = make_api(sqlite_url, limits=Limits(max_body_bytes=4096))
    big = seed()
    big["targets"][0]["model_deploy_id"] = "x" * 5000
    answer = api.call("admin", "POST", ADMIN, json=big)
    assert answer.status_code == 413
    assert answer.json()["reason"] == "body_too_large" and "4 KiB" in answer.json()["fix"]

    def chunks():  # no Content-Length: counted while streamed
        for _ in range(5):
            yield b" " * 1000

    streamed = api.call(
        "admin", "POST", ADMIN, content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201


def test_a_page_over_the_limit_is_400_with_the_limit_in_the_fix(api: Api) -> None:
    answer = api.call("admin", "GET", ADMIN, params={"limit": 201})
    assert answer.status_code == 400
    assert answer.json()["path"] == "query.limit" and "200" in answer.json()["fix"]


def test_audit_is_readable_by_admins_only_and_pages(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    changed = seed()
    changed["windows"][0]["priority"] = 20  # a change: an unchanged PUT keeps version 1
    api.call("admin", "PUT", f"{ADMIN}/{NAME}", json=changed)
    api.call("admin", "DELETE", f"{ADMIN}/{NAME}")
    assert api.call("alpha", "GET", "/admin/audit").status_code == 403
    page = api.call("admin", "GET", "/admin/audit", params={"name": NAME, "limit": 2}).json()
    assert [(a["action"], a["version"]) for a in page["items"]] == [
        ("schedule_created", 1),
        ("schedule_replaced", 2),
    ]
    rest = api.call(
        "admin", "GET", "/admin/audit", params={"name": NAME, "page_token": page["next_page_token"]}
    )
    assert [(a["action"], a["version"]) for a in rest.json()["items"]] == [("schedule_deleted", 2)]


def test_admins_manage_reservations_and_tenants_read_their_own_only(api: Api) -> None:
    created = api.call("admin", "POST", "/admin/reservations", json=RESERVATION)
    assert created.status_code == 201, created.text
    assert created.json()["budget_mib"] == 136582
    other = {
        **RESERVATION,
        "id": "rsv-beta",
        "namespace": "cmp-beta",
        "gpu_uuids": ["GPU-11111111-2222-3333-4444-555555555555"],
    }
    assert api.call("admin", "POST", "/admin/reservations", json=other).status_code == 201
    dup = api.call("admin", "POST", "/admin/reservations", json=RESERVATION)
    assert dup.status_code == 409 and dup.json()["reason"] == "reservation_exists"
    mine = api.call("alpha", "GET", "/api/v1/cmp/projects/alpha/reservations").json()["items"]
    assert [r["id"] for r in mine] == ["rsv-alpha"]
    hidden = api.call("alpha", "GET", "/api/v1/cmp/projects/alpha/reservations/rsv-beta")
    assert hidden.status_code == 404 and hidden.json()["reason"] == "reservation_not_found"
    assert api.call("alpha", "POST", "/admin/reservations", json=RESERVATION).status_code == 403
    assert api.call("alpha", "POST", "/admin/reservations/rsv-alpha:release").status_code == 403
    stale = api.call(
        "admin",
        "POST",
        "/admin/reservations/rsv-alpha:repin",
        json={"gpu_uuids": ["GPU-aaaaaaaa-2222-3333-4444-555555555555"], "generation": 7},
    )
    assert stale.status_code == 412 and stale.json()["reason"] == "stale_generation"
    released = api.call("admin", "POST", "/admin/reservations/rsv-alpha:release")
    assert released.status_code == 200 and released.json()["state"] == "RELEASED"
    audit = api.services.reservations.audit("rsv-alpha")
    admin = next(t for t in api.services.tokens.list() if t.name == "admin")
    assert {e.actor for e in audit} == {admin.actor}


def test_a_repin_to_something_that_is_not_a_gpu_uuid_is_refused_by_the_document_and_the_server(
    api: Api,
) -> None:
    """The schema states the GPU UUID rule on a repin's items (schemathesis found ``[""]``
    schema-valid but refused), and the answer names the item with the rule's own fix."""
    document = api.call("admin", "GET", "/openapi.json").json()
    items = document["components"]["schemas"]["RepinIn"]["properties"]["gpu_uuids"]
    assert items["items"]["pattern"].startswith("^GPU-") and items["uniqueItems"] is True
    assert api.call("admin", "POST", "/admin/reservations", json=RESERVATION).status_code == 201
    refused = api.call(
        "admin",
        "POST",
        "/admin/reservations/rsv-alpha:repin",
        json={"gpu_uuids": ["GPU-aaaaaaaa-2222-3333-4444-555555555555", ""], "generation": 1},
    )
    assert refused.status_code == 422
    (problem,) = refused.json()["errors"]
    assert (problem["path"], problem["reason"]) == ("gpu_uuids[1]", "invalid_gpu_uuid")
    assert "nvidia-smi -L" in problem["fix"]


def test_the_admission_check_flips_at_the_budget(sqlite_url: str) -> None:
    from datetime import datetime

    api = make_api(
        sqlite_url,
        pool=GPU42 / "gpu42-pool.yaml",
        start=datetime.fromisoformat("2026-10-19T10:00:00+07:00"),
    )
    schedule = json.loads((GPU42 / "gpu42-schedule.json").read_text())
    del schedule["scope"]
    vision = "/api/v1/cmp/projects/vision"
    api.tokens["vision"] = api.services.tokens.create(
        "vision", "cmp:vision", now=api.clock.now(), actor="t"
    )[1]
    assert (
        api.call("vision", "POST", f"{vision}/deploy-schedules", json=schedule).status_code == 201
    )
    url = f"{vision}/reservations/rsv-gpu42-shared:admission-check"
    ask = {
        "deploy_id": "md-vision-chat",
        "at": "2026-10-19T10:00:00+07:00",
        "schedule": "gpu42-shared",
    }
    at_budget = api.call("vision", "POST", url, json={**ask, "memory_mib": 136582 - 24000}).json()
    assert (at_budget["admitted"], at_budget["total_mib"], at_budget["budget_mib"]) == (
        True,
        136582,
        136582,
    )
    assert at_budget["running_mib"] == 24000  # C; B is stopped in business hours
    over = api.call("vision", "POST", url, json={**ask, "memory_mib": 136582 - 24000 + 1}).json()
    assert (over["admitted"], over["reason"]) == (False, "reservation_overcommitted")
    assert "over by 1 MiB" in over["fix"]
    night = api.call(
        "vision",
        "POST",
        url,
        json={**ask, "at": "2026-10-19T20:00:00+07:00", "memory_mib": 136582 - 24000},
    ).json()
    assert night["admitted"] is False and night["running_mib"] == 80000 + 24000


def test_ui_login_sets_a_strict_http_only_cookie_and_refuses_bad_tokens(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    bad = api.client.post("/ui/login", data={"token": "nope"}, follow_redirects=False)
    assert bad.status_code == 401 and "login-error" in bad.text
    good = api.client.post(
        "/ui/login",
        data={"token": api.tokens["alpha"], "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert good.status_code == 303 and good.headers["location"] == "/ui/"
    cookie = good.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    hidden = api.client.get(
        f"/ui/schedules/{NAME}"
    )  # the cookie is alpha's: an admin schedule is hidden
    assert hidden.status_code == 404
    api.client.cookies.clear()
    api.client.post("/ui/login", data={"token": api.tokens["admin"]}, follow_redirects=False)
    page = api.client.get(f"/ui/schedules/{NAME}")
    assert page.status_code == 200 and '"schedules": "/admin/deploy-schedules"' in page.text
    assert api.client.get("/ui/static/plotly.min.js").status_code == 200


def test_a_cookie_alone_never_authorises_a_write(api: Api) -> None:
    api.client.post("/ui/login", data={"token": api.tokens["admin"]}, follow_redirects=False)
    assert api.client.get(ADMIN).status_code == 200
    forged = api.client.post(ADMIN, json=seed())
    assert forged.status_code == 403 and forged.json()["reason"] == "csrf_refused"
    assert api.services.store.list_schedules() == []
    ui = api.client.post(ADMIN, json=seed(), headers={"X-Requested-With": "gps-ui"})
    assert ui.status_code == 201


def test_tokens_are_stored_hashed(api: Api) -> None:
    import sqlalchemy as sa

    with api.services.store.engine.connect() as conn:
        stored = " ".join(
            str(v) for row in conn.execute(sa.text("SELECT * FROM api_tokens")) for v in row
        )
    for token in api.tokens.values():
        secret = token.split("_", 2)[2]  # gpsd_<id>_<secret>; the secret itself may contain "_"
        assert len(secret) >= 26 and secret not in stored


def test_a_tenant_surface_for_a_project_name_that_cannot_exist_is_404(api: Api) -> None:
    answer = api.call("admin", "GET", tenant_base("Not_A_Project"))
    assert answer.status_code == 404 and answer.json()["reason"] == "project_not_found"


def test_openapi_tool_check_agrees(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "openapi.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
