"""Issue 21 item 16: typed answers for bodies that are not JSON, HEAD, no Host-built redirects,
a strict admission body.

Before: an undecodable or too-deep body answered a generic ``http_error``; a ``text/plain`` or
YAML body a 422 as if the document were wrong; HEAD on a GET route 405; ``GET /admin/…/`` a 307
to a Location built from the ``Host`` header; ``memory_mib: "100"`` was coerced.
"""

from __future__ import annotations

from api_support import ADMIN, Api, seed

ONE = f"{ADMIN}/gpu-pool-h100-shared"
JSON = {"Content-Type": "application/json"}


def test_undecodable_and_too_deep_bodies_are_invalid_json(api: Api) -> None:
    deep = b"[" * 5000 + b"]" * 5000
    for body in (b"\xff\xfe{", b'{"name": "x",', deep, b'{"a":' * 3000 + b"1" + b"}" * 3000):
        answer = api.call("admin", "POST", ADMIN, content=body, headers=JSON)
        assert answer.status_code == 400, (body[:10], answer.text)
        assert answer.json()["reason"] == "invalid_json", answer.text  # was http_error
        assert "Traceback" not in answer.text


def test_a_body_that_is_not_json_is_415_with_the_fix(api: Api) -> None:
    yaml = b"name: x\ntimezone: UTC\n"
    for content_type in ("text/plain", "application/yaml", "application/x-www-form-urlencoded", ""):
        headers = {"Content-Type": content_type} if content_type else {}
        answer = api.call("admin", "POST", ADMIN, content=yaml, headers=headers)
        assert answer.status_code == 415, (content_type, answer.text)  # was 422
        body = answer.json()
        assert body["reason"] == "unsupported_media_type" and "application/json" in body["fix"]
    assert (
        api.call(
            "admin",
            "POST",
            ADMIN,
            json=seed(),
            headers={"Content-Type": "application/json; charset=utf-8"},
        ).status_code
        == 201
    )
    assert (
        api.call("admin", "POST", f"{ONE}:apply-now").status_code == 200
    )  # no body: no type needed
    assert api.services.store.get_schedule("gpu-pool-h100-shared").version == 1


def test_head_is_served_on_get_routes(api: Api) -> None:
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    for path in (ADMIN, ONE, f"{ONE}/status", "/healthz"):
        head = api.call("admin", "HEAD", path)
        get = api.call("admin", "GET", path)
        assert head.status_code == 200 == get.status_code, path  # was 405
        assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
    assert api.call("anonymous", "HEAD", ADMIN).status_code == 401


def test_a_trailing_slash_is_a_404_never_a_redirect_built_from_host(api: Api) -> None:
    answer = api.client.get(
        f"{ADMIN}/", headers={**api.as_("admin"), "Host": "evil.example"}, follow_redirects=False
    )
    assert answer.status_code == 404  # was 307 to http://evil.example/admin/deploy-schedules
    assert "location" not in answer.headers


def test_the_admission_body_is_strict(api: Api) -> None:
    rsv = {
        "id": "rsv-beta",
        "node": "cmp-01",
        "gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3"],
        "namespace": "cmp-beta",
        "mode": "time_sliced",
        "gpu_memory_mib": 143771,
        "headroom": 0.95,
    }
    assert api.call("admin", "POST", "/admin/reservations", json=rsv).status_code == 201
    path = "/admin/reservations/rsv-beta:admission-check"
    coerced = api.call("admin", "POST", path, json={"deploy_id": "beta-chat", "memory_mib": "100"})
    assert coerced.status_code == 422 and coerced.json()["errors"][0]["path"] == "memory_mib"
    assert (
        api.call(
            "admin", "POST", path, json={"deploy_id": "beta-chat", "memory_mib": 100}
        ).status_code
        == 200
    )
