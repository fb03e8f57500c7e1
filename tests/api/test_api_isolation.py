"""Tenant isolation (R-MODEL-9): every caller × every operation, and nothing of beta seen by alpha.

Callers: an admin token, project alpha's, project beta's, no token, a revoked token and a
garbage token. Three schedules exist: the seed (admin), alpha-swap (alpha), beta-nightly (beta).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_support import ADMIN, Api, alpha_schedule, beta_schedule, seed, tenant_base

CALLERS = ("admin", "alpha", "beta", "anonymous", "revoked", "garbage")
SEED = "gpu-pool-h100-shared"
AT = {"at": "2026-10-21T14:00:00+07:00"}
RSV = {
    "id": "rsv-beta",
    "node": "cmp-01",
    "gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3"],
    "namespace": "cmp-beta",
    "mode": "time_sliced",
    "gpu_memory_mib": 143771,
    "headroom": 0.95,
}


def precondition(method: str) -> dict[str, str]:
    """If-Match: * on writes (the tenant surface requires an If-Match, issue 21 item 11)."""
    return {"If-Match": "*"} if method in ("PUT", "DELETE") else {}


def ops(
    base: str, name: str, doc: dict[str, Any], rsv_base: str
) -> list[tuple[str, str, str, Any]]:
    """(label, method, path, json body) of every operation of one surface on schedule ``name``."""
    one = f"{base}/{name}"
    return [
        ("list", "GET", base, None),
        ("get", "GET", one, None),
        ("status", "GET", f"{one}/status", None),
        ("timeline", "GET", f"{one}/timeline", None),
        ("dry-run", "POST", f"{one}:dry-run", AT),
        ("dry-run-edit", "POST", f"{one}:dry-run", {**AT, "schedule": doc}),
        ("dry-run-new", "POST", f"{base}:dry-run", {**AT, "schedule": {**doc, "name": "fresh"}}),
        ("replace", "PUT", one, doc),
        ("apply-now", "POST", f"{one}:apply-now", None),
        ("reservations", "GET", rsv_base, None),
        ("reservation", "GET", f"{rsv_base}/rsv-beta", None),
        (
            "admission",
            "POST",
            f"{rsv_base}/rsv-beta:admission-check",
            {"deploy_id": "beta-chat", "memory_mib": 1},
        ),
        ("delete", "DELETE", one, None),
    ]


ADMIN_OK = {
    "list": 200,
    "get": 200,
    "status": 200,
    "timeline": 200,
    "dry-run": 200,
    "dry-run-edit": 200,
    "dry-run-new": 200,
    "replace": 200,
    "apply-now": 200,
    "reservations": 200,
    "reservation": 200,
    "admission": 200,
    "delete": 204,
}
DENIED = {"anonymous": 401, "revoked": 401, "garbage": 401}


def expected_admin_surface(caller: str, label: str) -> int:
    if caller in DENIED:
        return DENIED[caller]
    return ADMIN_OK[label] if caller == "admin" else 403


def expected_beta_surface(caller: str, label: str) -> int:
    if caller in DENIED:
        return DENIED[caller]
    return ADMIN_OK[label] if caller in ("admin", "beta") else 404


@pytest.fixture
def world(api: Api) -> Api:
    for who, base, doc in (
        ("admin", ADMIN, seed()),
        ("alpha", tenant_base("alpha"), alpha_schedule()),
        ("beta", tenant_base("beta"), beta_schedule()),
    ):
        assert api.call(who, "POST", base, json=doc).status_code == 201
    assert api.call("admin", "POST", "/admin/reservations", json=RSV).status_code == 201
    return api


def _doc(name: str, builder: Any) -> dict[str, Any]:
    doc = builder()
    doc["name"] = name
    return doc


@pytest.mark.parametrize("caller", CALLERS)
def test_the_admin_surface(world: Api, caller: str) -> None:
    for label, method, path, body in ops(ADMIN, SEED, seed(), "/admin/reservations"):
        answer = world.call(caller, method, path, json=body, headers=precondition(method))
        assert answer.status_code == expected_admin_surface(caller, label), (label, answer.text)
        if answer.status_code >= 400:
            assert answer.json()["reason"] and answer.json()["fix"]
        if label == "apply-now":
            world.clock.advance(60)  # keep the rate limit out of the matrix


@pytest.mark.parametrize("caller", CALLERS)
def test_the_tenant_surface_of_beta(world: Api, caller: str) -> None:
    before = world.services.store.get_schedule("beta/beta-nightly")
    for label, method, path, body in ops(
        tenant_base("beta"),
        "beta-nightly",
        beta_schedule(),
        "/api/v1/cmp/projects/beta/reservations",
    ):
        answer = world.call(caller, method, path, json=body, headers=precondition(method))
        assert answer.status_code == expected_beta_surface(caller, label), (label, answer.text)
        if caller == "alpha":
            assert answer.json()["reason"] == "project_not_found"
            assert "beta-chat" not in answer.text and "nightly" not in answer.text
        world.clock.advance(60)
    if caller not in ("admin", "beta"):
        after = world.services.store.get_schedule("beta/beta-nightly")
        assert (after.version, after.spec) == (before.version, before.spec)


def test_alpha_cannot_reach_beta_through_its_own_surface(world: Api) -> None:
    """Names of another project's schedules, deploys and reservations look absent from alpha's
    surface."""
    base = tenant_base("alpha")
    for label, method, path, body in ops(
        base, "beta-nightly", beta_schedule(), "/api/v1/cmp/projects/alpha/reservations"
    ):
        if label in ("list", "dry-run-new"):
            continue
        answer = world.call("alpha", method, path, json=body, headers=precondition(method))
        if label in ("reservation", "admission"):
            assert (answer.status_code, answer.json()["reason"]) == (
                404,
                "reservation_not_found",
            ), label
        elif label == "reservations":
            assert answer.json()["items"] == []
        else:
            assert (answer.status_code, answer.json()["reason"]) == (404, "schedule_not_found"), (
                label
            )
    listed = world.call("alpha", "GET", base).json()
    assert [s["name"] for s in listed["items"]] == ["alpha-swap"]
    probe = world.call(
        "alpha", "POST", f"{base}:dry-run", json={**AT, "schedule": _doc("probe", beta_schedule)}
    )
    assert probe.status_code == 422 and probe.json()["errors"][0]["reason"] == "unknown_deploy"
    assert "STOPPED" not in probe.text and "stopped" not in json.dumps(probe.json()["errors"])
    steal = world.call("alpha", "POST", base, json=_doc("steal", beta_schedule))
    assert steal.status_code == 422 and steal.json()["errors"][0]["reason"] == "unknown_deploy"
    assert world.services.store.owner_of("beta-chat") == "beta/beta-nightly"
    admin_names = world.call("alpha", "GET", f"{base}/{SEED}")
    assert admin_names.status_code == 404


def test_admin_tokens_reach_every_project_and_tenant_tokens_never_the_admin_surface(
    world: Api,
) -> None:
    assert [
        s["name"] for s in world.call("admin", "GET", tenant_base("alpha")).json()["items"]
    ] == ["alpha-swap"]
    assert [s["name"] for s in world.call("admin", "GET", ADMIN).json()["items"]] == [SEED]
    refused = world.call("alpha", "GET", ADMIN)
    assert (refused.status_code, refused.json()["reason"]) == (403, "forbidden")
