"""HTTP hygiene the framework leaves open (R-API).

* A request body that is not JSON is ``415 unsupported_media_type`` (it answered 422 as if the
  document were wrong): the API reads JSON bodies only (``application/json`` or ``+json``); a
  YAML schedule goes through the CLI (``schedules apply -f``), which reads files.
* ``HEAD`` is served on every ``GET`` route (RFC 9110 §9.3.2): the GET runs and its body is
  dropped, headers kept.

The sign-in form (``/ui/login``) is a form post and stays outside the JSON rule. Trailing
slashes are never redirected (``redirect_slashes=False`` in ``create_app``): a redirect built
from the request's ``Host`` header points wherever a hostile client says.
"""

# Decisions embodied here (docs/decisions.md):
# * “API bodies are JSON only; HEAD as GET; no slash redirects”

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gps_dagster.api.errors import ErrorBody

FORM_PATHS = ("/ui/login", "/ui/logout")
JSON_TYPES = ("application/json",)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


class Protocol:
    """415 for a non-JSON body; HEAD as GET without the body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in (scope.get("headers") or [])}
        method, path = scope["method"], str(scope.get("path", ""))
        has_body = (
            headers.get(b"content-length", b"0") not in (b"0", b"")
            or b"transfer-encoding" in headers
        )
        if (
            method in ("POST", "PUT", "PATCH")
            and has_body
            and not path.startswith(FORM_PATHS)
            and not _is_json(headers.get(b"content-type", b"").decode("latin-1"))
        ):
            await _unsupported(send, headers.get(b"content-type", b"").decode("latin-1"))
            return
        if method != "HEAD":
            await self.app(scope, receive, send)
            return

        async def bodiless(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, bodiless)


async def _unsupported(send: Send, content_type: str) -> None:
    shown = content_type[:60] or "none"
    body = ErrorBody(
        status=415,
        reason="unsupported_media_type",
        message=f"the body's Content-Type is {shown!r}, not JSON",
        fix="send the document as JSON with Content-Type: application/json (a YAML file: "
        "`gps-dagster schedules apply -f FILE`)",
        path="Content-Type",
    ).model_dump()
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 415,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
