"""Limits that keep one client from hurting the others: body size, page size, apply-now rate.

The rate limiter is a token bucket per schedule on an injected ``Clock``:
tests move a virtual clock instead of sleeping, so no outcome depends on the
wall clock. The body limit is ASGI middleware that refuses a declared
``Content-Length`` over the limit before reading, and counts the bytes of a
streamed body while it buffers it (bounded by the limit itself).
"""

# Decisions embodied here (docs/decisions.md):
# * “Limits”

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gps_dagster.api.errors import ApiError, ErrorBody
from gps_dagster.ports import Clock


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 256 * 1024
    """A schedule document is a few KiB; 256 KiB leaves room for a thousand windows."""
    max_page_size: int = 200
    default_page_size: int = 50
    apply_now_burst: int = 3
    """Apply-now calls a schedule may receive back to back."""
    apply_now_per_minute: float = 6.0
    """Sustained apply-now rate per schedule (one every 10 s)."""
    max_range_days: int = 62
    """Longest timeline or dry-run range one request may ask for."""


class RateLimiter:
    """A token bucket per key; ``take`` refuses with 429 ``rate_limited`` and a Retry-After."""

    def __init__(self, clock: Clock, *, burst: int, per_minute: float) -> None:
        self._clock, self._burst, self._rate = clock, float(burst), per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> None:
        now = self._clock.now().timestamp()
        with self._lock:
            tokens, last = self._buckets.get(key, (self._burst, now))
            tokens = min(self._burst, tokens + max(0.0, now - last) * self._rate)
            if tokens < 1.0:
                wait = (1.0 - tokens) / self._rate
                self._buckets[key] = (tokens, now)
                raise ApiError(
                    429,
                    "rate_limited",
                    f"too many apply-now requests for '{key}'",
                    f"wait {wait:.0f} s (Retry-After); a schedule takes at most "
                    f"{self._rate * 60:g} apply-now per minute after a burst of {self._burst:g}",
                    headers={"Retry-After": str(max(1, round(wait + 0.5)))},
                )
            self._buckets[key] = (tokens - 1.0, now)

    def try_take(self, key: str) -> bool:
        """Take a token if there is one; False (nothing raised) when the bucket is empty."""
        try:
            self.take(key)
        except ApiError:
            return False
        return True

    def refund(self, key: str) -> None:
        """Give back the token of a request that was not taken (409 busy: R-API)."""
        with self._lock:
            if key in self._buckets:
                tokens, last = self._buckets[key]
                self._buckets[key] = (min(self._burst, tokens + 1.0), last)


class BodyLimit:
    """ASGI middleware: 413 ``body_too_large`` for a request body over ``max_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        chunks, seen, more = [], 0, True
        while more:  # buffer the (bounded) body, then replay it: a streamed body is counted too
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)  # a disconnect: let the app see it
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        replay: list[Message] = [
            {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        ]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, send: Send) -> None:
        body = ErrorBody(
            status=413,
            reason="body_too_large",
            message=f"the request body is over {self.max_bytes} bytes",
            fix=(
                f"send at most {self.max_bytes // 1024} KiB (split the schedule, or drop unused "
                "windows)"
            ),
        ).model_dump()
        payload = json.dumps(body).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
