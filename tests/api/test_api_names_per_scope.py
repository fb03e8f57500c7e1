"""Issue 21 item 1: schedule names are unique per scope, against a live server.

Before, names were one global namespace: a tenant's create of a name another project (or the
platform team) used answered ``409 schedule_exists`` and a free one 201 (a name oracle), a
create reusing a deploy the tenant already held answered ``target_owned`` or
``schedule_exists`` depending on the name (a quieter oracle), and a tenant could squat a name
another project would want. Now a tenant schedule is ``<project>/<name>``.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from api_support import ADMIN, Api, alpha_schedule, beta_schedule, make_api, seed, tenant_base
from live_server import serving

from gps_dagster.store.errors import AmbiguousScheduleName

ALPHA, BETA = tenant_base("alpha"), tenant_base("beta")


@pytest.fixture
def live(sqlite_url: str) -> Iterator[tuple[Api, httpx.Client]]:
    api = make_api(sqlite_url)
    with serving(api.client.app) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield api, http
    api.services.store.engine.dispose()


def _as(api: Api, who: str) -> dict[str, str]:
    return api.as_(who)


def test_a_name_another_scope_uses_is_free_in_mine_and_both_stay_apart(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    doc = seed()
    doc["name"] = "shared"
    assert http.post(ADMIN, json=doc, headers=_as(api, "admin")).status_code == 201
    assert (
        http.post(BETA, json=beta_schedule("shared"), headers=_as(api, "beta")).status_code == 201
    )

    created = http.post(ALPHA, json=alpha_schedule("shared"), headers=_as(api, "alpha"))
    assert created.status_code == 201, created.text  # was 409 schedule_exists: the oracle
    body = created.json()
    assert (body["name"], body["id"], body["document"]["name"]) == (
        "shared",
        "alpha/shared",
        "shared",
    )
    assert created.headers["Location"] == f"{ALPHA}/shared"

    again = http.post(ALPHA, json=alpha_schedule("shared"), headers=_as(api, "alpha"))
    assert again.status_code == 409 and again.json()["reason"] == "schedule_exists"  # my own scope

    mine = http.get(f"{ALPHA}/shared", headers=_as(api, "alpha")).json()
    theirs = http.get(f"{BETA}/shared", headers=_as(api, "beta")).json()
    admins = http.get(f"{ADMIN}/shared", headers=_as(api, "admin")).json()
    assert [t["model_deploy_id"] for t in mine["document"]["targets"]] == [
        "alpha-chat",
        "alpha-batch",
    ]
    assert [t["model_deploy_id"] for t in theirs["document"]["targets"]] == ["beta-chat"]
    assert admins["scope"] == "admin" and admins["id"] == "shared"
    listed = http.get(ALPHA, headers=_as(api, "alpha")).json()["items"]
    assert [i["name"] for i in listed] == ["shared"]

    # a GET → PUT round trip of the tenant's own document works with its surface's name
    put = http.put(
        f"{ALPHA}/shared",
        json={**mine["document"], "enabled": False},
        headers={**_as(api, "alpha"), "If-Match": '"1"'},
    )
    assert put.status_code == 200, put.text
    assert (
        http.delete(f"{ALPHA}/shared", headers={**_as(api, "alpha"), "If-Match": '"2"'}).status_code
        == 204
    )
    assert http.get(f"{BETA}/shared", headers=_as(api, "beta")).status_code == 200
    assert http.get(f"{ADMIN}/shared", headers=_as(api, "admin")).status_code == 200


def test_a_tenant_cannot_squat_a_name_another_project_will_want(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    squat = http.post(ALPHA, json=alpha_schedule("beta-nightly"), headers=_as(api, "alpha"))
    assert squat.status_code == 201
    wanted = http.post(BETA, json=beta_schedule("beta-nightly"), headers=_as(api, "beta"))
    assert wanted.status_code == 201, wanted.text  # was 409 schedule_exists
    assert wanted.json()["id"] == "beta/beta-nightly"
    assert {r.name for r in api.services.store.list_schedules()} == {
        "alpha/beta-nightly",
        "beta/beta-nightly",
    }


def test_reusing_a_held_deploy_answers_the_same_whatever_the_name(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    assert (
        http.post(BETA, json=beta_schedule("beta-nightly"), headers=_as(api, "beta")).status_code
        == 201
    )
    assert (
        http.post(ALPHA, json=alpha_schedule("alpha-swap"), headers=_as(api, "alpha")).status_code
        == 201
    )
    answers = {
        name: http.post(ALPHA, json=alpha_schedule(name), headers=_as(api, "alpha")).json()[
            "reason"
        ]
        for name in ("beta-nightly", "never-used")  # another project's name, a free one
    }
    assert answers == {
        "beta-nightly": "target_owned",
        "never-used": "target_owned",
    }  # was schedule_exists


def test_a_body_naming_another_project_is_refused_with_the_field_path(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    wrong = http.post(ALPHA, json=alpha_schedule("beta/x"), headers=_as(api, "alpha"))
    assert wrong.status_code == 422
    problem = wrong.json()["errors"][0]
    assert (problem["path"], problem["reason"]) == ("name", "name_scope_mismatch")
    assert api.services.store.list_schedules() == []


def test_the_cli_name_of_a_tenant_schedule_is_qualified_and_a_bare_one_resolves(
    live: tuple[Api, httpx.Client],
) -> None:
    api, http = live
    store = api.services.store
    assert (
        http.post(ALPHA, json=alpha_schedule("solo"), headers=_as(api, "alpha")).status_code == 201
    )
    assert store.resolve_name("solo") == "alpha/solo"  # one project carries it: that one
    assert store.resolve_name("alpha/solo") == "alpha/solo"
    assert store.resolve_name("absent") == "absent"
    assert http.post(BETA, json=beta_schedule("solo"), headers=_as(api, "beta")).status_code == 201
    with pytest.raises(AmbiguousScheduleName) as caught:
        store.resolve_name("solo")
    assert caught.value.candidates == ("alpha/solo", "beta/solo")
