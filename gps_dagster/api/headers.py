"""Security headers on every answer (R-API).

* ``Content-Security-Policy``: scripts, styles and fetches only from this origin; no plugin,
  no ``<base>``, forms post only here, and no framing (``frame-ancestors 'none'``, with
  ``X-Frame-Options: DENY`` for older browsers). plotly.js adds ``<style>`` elements and
  inline styles while it draws, hence ``style-src 'unsafe-inline'``; the page's only inline
  ``<script>`` is a JSON data block (``type="application/json"``), which CSP does not run.
* ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: same-origin`` (no referrer leaves
  for another site; ``no-referrer`` would make the browser send ``Origin: null`` on the page's
  own sign-in form (Fetch standard, "serializing a request origin"), which the login's Origin
  check must refuse).
* ``Cache-Control: no-store`` on everything but the static files: JSON answers and the pages
  carry schedules and tokens' views, which no shared cache may keep.

ASGI middleware (not ``BaseHTTPMiddleware``): it only edits the response start message.
"""

# Decisions embodied here (docs/decisions.md):
# * “Security headers in one ASGI middleware”

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
FIXED = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
STATIC_PREFIX = "/ui/static/"


class SecurityHeaders:
    """Adds ``FIXED`` to every HTTP answer, and ``Cache-Control: no-store`` outside static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cacheable = str(scope.get("path", "")).startswith(STATIC_PREFIX)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in FIXED.items():
                    headers[name] = value
                if not cacheable:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)
