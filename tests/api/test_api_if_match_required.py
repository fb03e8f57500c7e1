"""Issue 21 item 11: on the tenant surface a change needs If-Match (428 without it).

Before, If-Match was optional: an editor holding version 1 silently overwrote version 2.
"""

from __future__ import annotations

from api_support import ADMIN, Api, alpha_schedule, seed, tenant_base

ONE = f"{tenant_base('alpha')}/alpha-swap"


def test_a_tenant_write_without_if_match_is_428_and_changes_nothing(api: Api) -> None:
    assert api.call("alpha", "POST", tenant_base("alpha"), json=alpha_schedule()).status_code == 201
    edited = alpha_schedule()
    edited["windows"][0]["priority"] = 20
    for method, body in (("PUT", edited), ("DELETE", None)):
        answer = api.call("alpha", method, ONE, json=body)
        assert answer.status_code == 428, (method, answer.text)  # was 200 / 204
        problem = answer.json()
        assert problem["reason"] == "precondition_required" and problem["path"] == "If-Match"
        assert "ETag" in problem["fix"]
    stored = api.services.store.get_schedule("alpha/alpha-swap")
    assert stored.version == 1 and stored.spec.windows[0].priority == 10

    stale = api.call("alpha", "PUT", ONE, json=edited, headers={"If-Match": '"1"'})
    assert stale.status_code == 200 and stale.headers["ETag"] == '"2"'
    lost = api.call("alpha", "PUT", ONE, json=alpha_schedule(), headers={"If-Match": '"1"'})
    assert lost.status_code == 412  # the stale editor is told, not obeyed
    anyway = api.call("alpha", "DELETE", ONE, headers={"If-Match": "*"})
    assert anyway.status_code == 204  # "*": overwrite whatever is stored, on purpose


def test_the_admin_surface_keeps_if_match_optional(api: Api) -> None:
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    assert api.call("admin", "PUT", f"{ADMIN}/gpu-pool-h100-shared", json=seed()).status_code == 200
