"""Issue 21 item 10: CSP, frame-ancestors, nosniff, Referrer-Policy and ``no-store`` on answers.

Before, no answer carried any of them: the page could be framed (clickjacking), a JSON answer
could be sniffed as HTML, and a shared cache could keep a schedule or an error body.
"""

from __future__ import annotations

import pytest
from api_support import ADMIN, Api, seed

from gps_dagster.api import Limits


def _secured(answer: object, *, cacheable: bool = False) -> None:
    headers = answer.headers  # type: ignore[attr-defined]
    csp = headers["content-security-policy"]
    assert (
        "frame-ancestors 'none'" in csp
        and "script-src 'self';" in csp
        and "object-src 'none'" in csp
    )
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
    assert (headers.get("cache-control") == "no-store") is not cacheable, headers.get(
        "cache-control"
    )


def test_every_kind_of_answer_carries_the_security_headers(api: Api) -> None:
    created = api.call("admin", "POST", ADMIN, json=seed())
    assert created.status_code == 201
    answers = [
        created,
        api.call("admin", "GET", f"{ADMIN}/gpu-pool-h100-shared"),
        api.call("anonymous", "GET", ADMIN),  # 401
        api.call("admin", "GET", f"{ADMIN}/absent"),  # 404
        api.call("admin", "POST", ADMIN, json={"name": "x"}),  # 422
        api.call("anonymous", "GET", "/healthz"),
        api.call("anonymous", "GET", "/openapi.json"),
        api.call("anonymous", "GET", "/ui/login"),
    ]
    assert [a.status_code for a in answers] == [201, 200, 401, 404, 422, 200, 200, 200]
    for answer in answers:
        _secured(answer)
    static = api.call("anonymous", "GET", "/ui/static/timeline.css")
    assert static.status_code == 200
    _secured(static, cacheable=True)  # the static files may be cached


def test_a_refused_oversized_body_carries_them_too(sqlite_url: str) -> None:
    from api_support import make_api

    api = make_api(sqlite_url, limits=Limits(max_body_bytes=1024))
    try:
        answer = api.call(
            "admin",
            "POST",
            ADMIN,
            content=b"{" + b" " * 4096 + b"}",
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 413
        _secured(answer)
    finally:
        api.client.close()
        api.services.store.engine.dispose()


def test_an_unhandled_failure_answers_the_500_with_them_too(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generic 500 comes from Starlette's outermost error middleware, outside every middleware
    ``add_middleware`` adds: it went out bare until the headers wrapped the whole stack."""
    api.call("admin", "POST", ADMIN, json=seed())

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("forced internal error")

    monkeypatch.setattr(api.services.store, "list_status", broken)
    answer = api.call("admin", "GET", f"{ADMIN}/gpu-pool-h100-shared/status")
    assert answer.status_code == 500 and answer.json()["reason"] == "internal_error"
    _secured(answer)
