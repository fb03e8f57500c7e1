"""Issue 21 item 9: the page's cookie is a server-side session, not the bearer token.

Before, ``/ui/login`` set the raw token as the cookie: no expiry, still valid after sign-out
(only the browser forgot it), a cross-site form could sign a victim in (login CSRF), and
``Secure`` only when uvicorn itself saw https. Now a session has its own secret, an expiry,
and ends at sign-out; the login refuses other origins; ``Secure`` is a setting.
"""

from __future__ import annotations

from datetime import timedelta

from api_support import ADMIN, Api, make_api, seed

from gps_dagster.api import auth

SAME = {"Origin": "http://testserver"}


def _login(api: Api, who: str = "admin", **headers: str) -> object:
    return api.client.post(
        "/ui/login",
        data={"token": api.tokens[who]},
        follow_redirects=False,
        headers={**SAME, **headers},
    )


def test_the_cookie_is_a_session_that_sign_out_ends_server_side(api: Api) -> None:
    answer = _login(api)
    assert answer.status_code == 303  # type: ignore[attr-defined]
    cookie = api.client.cookies.get(auth.COOKIE)
    assert (
        cookie and cookie != api.tokens["admin"] and api.tokens["admin"] not in cookie
    )  # was the token
    set_cookie = answer.headers["set-cookie"].lower()  # type: ignore[attr-defined]
    assert (
        "max-age=43200" in set_cookie
        and "httponly" in set_cookie
        and "samesite=strict" in set_cookie
    )
    assert api.client.get(ADMIN).status_code == 200
    out = api.client.post("/ui/logout", headers=SAME, follow_redirects=False)
    assert out.status_code == 303
    api.client.cookies.set(auth.COOKIE, cookie)  # a browser (or a thief) that kept the cookie
    after = api.client.get(ADMIN)
    assert after.status_code == 401 and "sign in again" in after.json()["message"]  # was 200


def test_a_session_expires_and_dies_with_its_token(api: Api) -> None:
    _login(api)
    api.clock.advance(timedelta(hours=12).total_seconds() - 1)
    assert api.client.get(ADMIN).status_code == 200
    api.clock.advance(1)
    assert api.client.get(ADMIN).status_code == 401  # expired
    api.client.cookies.clear()
    _login(api, "alpha")
    assert api.client.get("/api/v1/cmp/projects/alpha/deploy-schedules").status_code == 200
    from gps_dagster.store.tokens import TokenRepository

    TokenRepository(api.services.store.engine).revoke("alpha", now=api.clock.now(), actor="test")
    assert api.client.get("/api/v1/cmp/projects/alpha/deploy-schedules").status_code == 401


def test_a_cross_site_sign_in_is_refused(api: Api) -> None:
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "", "Sec-Fetch-Site": "cross-site"},
    ):
        headers = {k: v for k, v in headers.items() if v}
        answer = api.client.post(
            "/ui/login",
            data={"token": api.tokens["admin"]},
            follow_redirects=False,
            headers=headers,
        )
        assert answer.status_code == 403, headers  # was 303: signed in
        assert answer.json()["reason"] == "cross_site_refused"
        assert auth.COOKIE not in api.client.cookies
    assert _login(api).status_code == 303  # type: ignore[attr-defined]


def test_secure_is_a_setting(sqlite_url: str) -> None:
    api = make_api(sqlite_url)
    try:
        api.services.secure_cookies = True
        answer = _login(api)  # over plain http (an ingress terminates TLS)
        assert "secure" in answer.headers["set-cookie"].lower()  # type: ignore[attr-defined]
        assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    finally:
        api.client.close()
        api.services.store.engine.dispose()
