"""Issue 21 item 13: reservation writes and refused calls are in ``/admin/audit``.

Before, the README said "every write" but a reservation created through the API was only in the
ledger's own log, and a refused call (401/403/404/409/429) left no trace at all: a probe was
invisible. Refusals are rate-limited per caller, and the row after a cut says how many were
left out.
"""

from __future__ import annotations

from typing import Any

from api_support import ADMIN, Api, alpha_schedule, seed, tenant_base

RSV = {
    "id": "rsv-beta",
    "node": "cmp-01",
    "gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3"],
    "namespace": "cmp-beta",
    "mode": "time_sliced",
    "gpu_memory_mib": 143771,
    "headroom": 0.95,
}


def _audit(api: Api, **params: Any) -> list[dict[str, Any]]:
    rows = [r for r in api.services.store.list_audit(limit=1000, **params)]
    return [
        {
            "actor": r.actor,
            "action": r.action,
            "kind": r.object_kind,
            "name": r.object_name,
            "scope": r.scope,
            "detail": r.detail,
        }
        for r in rows
    ]


def test_a_reservation_written_through_the_api_is_in_the_audit(api: Api) -> None:
    assert api.call("admin", "POST", "/admin/reservations", json=RSV).status_code == 201
    released = api.call("admin", "POST", "/admin/reservations/rsv-beta:release")
    assert released.status_code == 200, released.text
    items = api.call("admin", "GET", "/admin/audit", params={"name": "rsv-beta"}).json()["items"]
    assert [(i["action"], i["object_kind"]) for i in items] == [
        ("reservation_create", "reservation"),
        ("reservation_set_state", "reservation"),
    ]
    assert all(i["actor"].startswith("token:admin(") for i in items)
    assert items[1]["detail"]["new"] == {"state": "RELEASED"}


def test_refused_calls_leave_a_row_naming_the_caller_never_the_secret(api: Api) -> None:
    assert api.call("alpha", "POST", tenant_base("alpha"), json=alpha_schedule()).status_code == 201
    probes = [
        ("anonymous", "GET", ADMIN, None, 401),
        ("garbage", "GET", ADMIN, None, 401),
        ("alpha", "GET", ADMIN, None, 403),
        ("alpha", "GET", f"{tenant_base('beta')}/beta-nightly", None, 404),
        ("alpha", "GET", f"{tenant_base('alpha')}/nope", None, 404),
        ("alpha", "POST", tenant_base("alpha"), alpha_schedule(), 409),
    ]
    for who, method, path, body, status in probes:
        assert api.call(who, method, path, json=body).status_code == status, (who, path)
    refused = [r for r in _audit(api) if r["action"] == "refused"]
    assert [
        (r["actor"].split("(")[0], r["name"], r["detail"]["status"], r["detail"]["reason"])
        for r in refused
    ] == [
        ("anonymous", ADMIN, 401, "unauthenticated"),
        ("anonymous", ADMIN, 401, "unauthenticated"),
        ("token:alpha", ADMIN, 403, "forbidden"),
        ("token:alpha", f"{tenant_base('beta')}/beta-nightly", 404, "project_not_found"),
        ("token:alpha", f"{tenant_base('alpha')}/nope", 404, "schedule_not_found"),
        ("token:alpha", tenant_base("alpha"), 409, "schedule_exists"),
    ]
    assert refused[2]["scope"] == "cmp:alpha" and refused[0]["scope"] is None
    text = repr(_audit(api))
    assert not any(secret in text for secret in api.tokens.values())


def test_a_flood_of_refusals_is_cut_and_the_next_row_counts_what_was_left_out(api: Api) -> None:
    for _ in range(30):
        assert api.call("anonymous", "GET", ADMIN).status_code == 401
    assert len([r for r in _audit(api) if r["action"] == "refused"]) == 20
    api.clock.advance(60)
    assert api.call("anonymous", "GET", ADMIN).status_code == 401
    rows = [r for r in _audit(api) if r["action"] == "refused"]
    assert len(rows) == 21 and rows[-1]["detail"]["suppressed"] == 10
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201  # others are not cut
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 409
    assert [r["actor"].split("(")[0] for r in _audit(api) if r["action"] == "refused"][
        -1
    ] == "token:admin"
