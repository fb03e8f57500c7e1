"""The timeline page ``/ui/schedules/{name}``: the seed's picture, in the browser.

Authentication is the API's: a token, posted once to ``/ui/login`` (from this origin only), opens a
server-side session (``store/sessions.py``: an expiry, revoked at sign-out) whose secret is an
HttpOnly, SameSite=Strict cookie, and the page's script calls the same JSON operations as curl does
(with ``X-Requested-With: gps-ui`` on the POSTs). Charts are drawn by plotly.js, served from the
installed ``plotly`` wheel (``plotly/package_data/plotly.min.js``): nothing is vendored by hand and
nothing is downloaded at run time.
"""

# Decisions embodied here (docs/decisions.md):
# * “Charts: plotly.js from the `plotly` wheel”
# * “The page's cookie is a server-side session”
# * “The timeline page opens at now and at a readable span”

from __future__ import annotations

import html
import json
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from gps_dagster.api import auth
from gps_dagster.api.errors import ApiError
from gps_dagster.api.services import ApiServices
from gps_dagster.ports import CoreError
from gps_dagster.store.errors import StoreError

STATIC = Path(__file__).with_name("static")
FILES = {"timeline.js": "text/javascript", "timeline.css": "text/css"}


def plotly_js() -> Path:
    """plotly.min.js as the installed plotly wheel ships it."""
    path = Path(str(resources.files("plotly"))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise RuntimeError(
            f"plotly.min.js is missing from the plotly package ({path}): reinstall plotly"
        )
    return path


LOGIN = (
    """<!doctype html><html lang="en"><head><meta charset="utf-8">"""
    """<title>gps-dagster login</title>
<link rel="stylesheet" href="/ui/static/timeline.css"></head><body><main class="login">
<h1>gps-dagster</h1><p>Sign in with an API token (<code>gps-dagster tokens create</code>).</p>
{error}<form method="post" action="/ui/login"><input type="hidden" name="next" value="{next}">
<label>Token <input id="token" name="token" type="password" autocomplete="off" size="60"></label>
<button id="login" type="submit">Sign in</button></form></main></body></html>"""
)

PAGE = (
    """<!doctype html><html lang="en"><head><meta charset="utf-8">"""
    """<title>{title} · gps-dagster</title>
<link rel="stylesheet" href="/ui/static/timeline.css"></head><body>
<header><h1>{title}</h1><span class="scope">{scope}</span><span class="tz">{tz}</span>
<form method="post" action="/ui/logout"><button type="submit">Sign out</button></form></header>
<nav class="week"><button id="prev-week" type="button">◀ previous</button>
<label>From <input id="week" type="date"></label>
<button id="next-week" type="button">next ▶</button>
<label>Span <select id="span"><option value="week">week</option><option value="day">day</option>
<option value="6h">6 hours</option><option value="1h">1 hour</option></select></label>
<button id="now" type="button">now</button><span id="range"></span></nav>
<section><div id="chart" class="chart"></div>"""
    """<p class="hint">Click the chart at an instant to see who
decided each target's state then.</p><div id="warnings"></div></section>
<section><h2>At <span id="instant-label">—</span></h2><table id="instant"><thead><tr><th>target</th>
<th>desired</th><th>decided by</th><th>note</th></tr></thead><tbody></tbody></table></section>
<section id="reservations"></section>
<script id="config" type="application/json">{config}</script>
<script src="/ui/static/plotly.min.js"></script><script src="/ui/static/timeline.js"></script>
</body></html>"""
)


SPANS = ("week", "day", "6h", "1h")

BAD_QUERY = (
    """<!doctype html><html lang="en"><head><meta charset="utf-8">"""
    """<title>{title} · gps-dagster</title>
<link rel="stylesheet" href="/ui/static/timeline.css"></head><body><header><h1>{title}</h1></header>
<main><p class="error" id="query-error"><b>{field}</b>: {reason}</p><p id="query-fix">Fix: {fix}</p>
</main></body></html>"""
)


def _query_error(name: str, field: str, value: str, reason: str, fix: str) -> HTMLResponse:
    """A page that says which query field is wrong and how to fix it (never a blank page)."""
    return HTMLResponse(
        BAD_QUERY.format(
            title=html.escape(name),
            field=html.escape(field),
            reason=html.escape(f"{value!r} {reason}"),
            fix=html.escape(fix),
        ),
        status_code=400,
    )


def _check_query(name: str, week: str | None, span: str | None) -> HTMLResponse | None:
    if week is not None:
        try:
            date.fromisoformat(week)
        except ValueError:
            return _query_error(
                name,
                "week",
                week,
                "is not a date (YYYY-MM-DD)",
                f"open /ui/schedules/{name}?week=2026-10-19 (any day of the week wanted), "
                "or leave ?week= out to open at now",
            )
    if span is not None and span not in SPANS:
        return _query_error(
            name,
            "span",
            span,
            f"is not one of {', '.join(SPANS)}",
            "use ?span=1h (or day, 6h, week), or leave it out: the page picks "
            "the widest span in which the shortest window stays readable",
        )
    return None


def _safe_json(value: Any) -> str:
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _reservations(svc: ApiServices, targets: tuple[str, ...]) -> list[str]:
    try:
        views = svc.core.get_deploys(list(targets))
    except CoreError:
        return []
    ids = {
        r
        for v in views.values()
        if v.reservation is not None
        for r in v.reservation.reservation_ids
    }
    return sorted(ids)


def _same_origin(request: Request) -> None:
    """403 for a form posted from another site (login CSRF, R-API).

    Browsers send ``Origin`` on every POST (and ``Sec-Fetch-Site``); a request with neither is
    not a browser's cross-site form (curl, a test client) and passes.
    """
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if origin is not None:
        ok = origin in (f"http://{host}", f"https://{host}")
    else:
        ok = request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    if not ok:
        raise ApiError(
            403,
            "cross_site_refused",
            "a sign-in or sign-out posted from another site was refused",
            "sign in from this server's own /ui/login page",
        )


def install(app: FastAPI, svc: ApiServices) -> None:
    """Add the login, logout, static and timeline routes (not part of the OpenAPI document)."""

    @app.get("/ui/login", include_in_schema=False)
    def login_page(next: str = "/ui/") -> HTMLResponse:
        return HTMLResponse(LOGIN.format(error="", next=html.escape(next)))

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        _same_origin(request)  # login CSRF: a cross-site form must not sign the victim in
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token, target = form.get("token", [""])[0].strip(), form.get("next", ["/ui/"])[0]
        if not target.startswith("/ui/") or target.startswith("//"):
            target = "/ui/"
        now = svc.clock.now()
        record = await run_in_threadpool(svc.tokens.verify, token, now=now)
        if record is None:
            error = (
                '<p class="error" id="login-error">That token is unknown, malformed, revoked or '
                "expired.</p>"
            )
            return HTMLResponse(
                LOGIN.format(error=error, next=html.escape(target)), status_code=401
            )
        secret, session = await run_in_threadpool(svc.sessions.open, record.id, now=now)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            auth.COOKIE,
            secret,
            httponly=True,
            samesite="strict",
            path="/",
            max_age=int((session.expires_at - now).total_seconds()),
            secure=svc.secure_cookies or request.url.scheme == "https",
        )
        return response

    @app.post("/ui/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        _same_origin(request)
        cookie = request.cookies.get(auth.COOKIE)
        if cookie:
            svc.sessions.revoke(cookie, now=svc.clock.now())  # the cookie is dead even if kept
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(auth.COOKIE, path="/")
        return response

    @app.get("/ui/static/{file}", include_in_schema=False)
    def static(file: str) -> Response:
        if file == "plotly.min.js":
            return FileResponse(plotly_js(), media_type="text/javascript")
        if file not in FILES:
            raise ApiError(404, "not_found", f"no static file '{file}'", "see the timeline page")
        return FileResponse(STATIC / file, media_type=FILES[file])

    @app.get("/ui/", include_in_schema=False)
    def index(request: Request) -> Response:
        who = _who(request)
        if who is None:
            return RedirectResponse("/ui/login", status_code=303)
        scope = None if who.scope == "admin" else who.scope
        rows = [r for r in svc.store.list_schedules() if scope is None or r.spec.scope == scope]
        items = "".join(
            f'<li><a href="/ui/schedules/{quote(r.name)}">{html.escape(r.name)}</a> '
            f'<span class="scope">{html.escape(r.spec.scope)}</span></li>'
            for r in rows
        )
        return HTMLResponse(
            f'<!doctype html><html><head><meta charset="utf-8"><title>gps-dagster</title>'
            f'<link rel="stylesheet" href="/ui/static/timeline.css"></head><body><header>'
            f'<h1>Schedules</h1></header><ul class="schedules">{items}</ul></body></html>'
        )

    @app.get("/ui/schedules/{name:path}", include_in_schema=False)
    def schedule_page(
        name: str, request: Request, week: str | None = None, span: str | None = None
    ) -> Response:
        who = _who(request)
        if who is None:
            return RedirectResponse(
                f"/ui/login?next={quote('/ui/schedules/' + name)}", status_code=303
            )
        if who.scope != "admin" and "/" not in name:  # a tenant's own name means its project's
            name = f"{who.project}/{name}"
        try:
            record = svc.store.find_schedule(svc.store.resolve_name(name))
        except StoreError:  # ambiguous: the admin names it with its project
            record = None
        if record is None or (who.scope != "admin" and record.spec.scope != who.scope):
            raise ApiError(404, "schedule_not_found", f"no schedule named '{name}'", "see /ui/")
        bad = _check_query(name, week, span)
        if bad is not None:
            return bad
        spec = record.spec
        base = "/admin" if spec.scope == "admin" else f"/api/v1/cmp/projects/{spec.project}"
        config = {
            "name": spec.local_name,
            "scope": spec.scope,
            "timezone": spec.timezone,
            "week": week,
            "span": span,
            "now": svc.clock.now().astimezone(spec.tz).isoformat(),
            "targets": list(spec.target_ids),
            "schedules": f"{base}/deploy-schedules",
            "reservationsBase": f"{base}/reservations",
            "reservations": _reservations(svc, spec.target_ids),
        }
        return HTMLResponse(
            PAGE.format(
                title=html.escape(record.name),
                scope=html.escape(spec.scope),
                tz=html.escape(spec.timezone),
                config=_safe_json(config),
            )
        )

    def _who(request: Request) -> Any:
        try:
            return auth.principal(request)
        except ApiError:
            return None
