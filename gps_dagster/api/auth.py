"""Who is calling, and what they may see (SPEC R-MODEL-9).

A caller is the token it presents: ``Authorization: Bearer <token>``, or the ``gps_session`` cookie
the timeline page's login sets (a server-side session of that token, with an expiry, revoked at
sign-out; HttpOnly, SameSite=Strict). A cookie alone never authorises a write: non-GET requests
carried by the cookie must also send ``X-Requested-With: gps-ui``, a header a cross-site form cannot
set (CSRF).

Scopes: ``admin`` may use every surface; ``cmp:<project>`` only its own
project's tenant surface; ``cmp:<project>:read`` only reads it (GET, dry-run, timeline,
admission check). A tenant naming another project gets the same 404
as a project that does not exist, so it learns nothing about others.
"""

# Decisions embodied here (docs/decisions.md):
# * “One URL per schedule”
# * “Tokens”
# * “Identifier patterns end with `\Z`, not `$`”
# * “A read-only tenant scope and token expiry”

from __future__ import annotations

import re

from fastapi import Request

from gps_dagster.api.errors import ApiError
from gps_dagster.store.tokens import TokenRecord

COOKIE = "gps_session"
CSRF_HEADER = "x-requested-with"
CSRF_VALUE = "gps-ui"
PROJECT = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def presented_token(request: Request) -> str | None:
    """The token of the request: the bearer header first, else the session cookie."""
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, value = header.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else ""
    cookie = request.cookies.get(COOKIE)
    if cookie is None:
        return None
    if request.method not in _SAFE and request.headers.get(CSRF_HEADER) != CSRF_VALUE:
        raise ApiError(
            403,
            "csrf_refused",
            "a write carried only by the session cookie was refused",
            f"send the header X-Requested-With: {CSRF_VALUE} (the timeline page does), "
            "or use Authorization: Bearer <token>",
        )
    return cookie


def unauthenticated(detail: str) -> ApiError:
    return ApiError(
        401,
        "unauthenticated",
        detail,
        "send Authorization: Bearer <token>; an operator creates one with `gps-dagster tokens "
        "create`",
        headers={"WWW-Authenticate": 'Bearer realm="gps-dagster"'},
    )


def principal(request: Request) -> TokenRecord:
    """The live token behind the request, or 401 (missing, malformed, unknown, revoked, expired).

    A bearer header carries the token; the cookie carries a server-side session
    (``store/sessions.py``, R-API) that resolves to its token, which must still be live.
    """
    services = request.app.state.services
    now = services.clock.now()
    record: TokenRecord | None
    if request.headers.get("authorization", "") == "" and request.cookies.get(COOKIE) is not None:
        secret = presented_token(request) or ""  # the CSRF rule of cookie writes first
        session = services.sessions.resolve(secret, now=now)
        record = services.tokens.live(session.token_id, now=now) if session is not None else None
        if record is None:
            raise unauthenticated(
                "the session is unknown, signed out or expired: sign in again at /ui/login"
            )
    else:
        token = presented_token(request)
        if token is None:
            raise unauthenticated("no credentials")
        record = services.tokens.verify(token, now=now)
        if record is None:
            raise unauthenticated("the token is unknown, malformed, revoked or expired")
    request.state.principal = record  # who a refusal's audit row names (api/refusals.py)
    return record


def require_admin(who: TokenRecord) -> None:
    if who.scope != "admin":
        raise ApiError(
            403,
            "forbidden",
            "this surface needs an admin token",
            "use /api/v1/cmp/projects/<your project>/… with a project token",
        )


def require_write(who: TokenRecord) -> None:
    """403 for a read-only token (``cmp:<project>:read``, R-API) on a write."""
    if who.read_only:
        raise ApiError(
            403,
            "read_only_token",
            f"token scope '{who.scope}' may only read",
            f"use a token of scope cmp:{who.project} for changes and apply-now",
        )


def tenant_scope(who: TokenRecord, project: str) -> str:
    """The schedule scope of the tenant surface of ``project`` for this caller, or 404."""
    if not PROJECT.match(project) or (who.scope != "admin" and who.project != project):
        raise project_not_found(project)
    return f"cmp:{project}"


def project_not_found(project: str) -> ApiError:
    return ApiError(
        404,
        "project_not_found",
        f"no project '{project}' is visible to this token",
        "use the project your token was created for (`gps-dagster tokens list`)",
    )
