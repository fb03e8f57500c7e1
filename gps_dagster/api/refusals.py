"""Refused calls leave a trace in the audit log, rate-limited (R-API).

A probe (a tenant trying names, paths or tokens) used to leave nothing: only writes were
audited. Every 401, 403, 404, 409, 412, 428 and 429 is now an ``audit_log`` row (action
``refused``, kind ``request``, the path as object name, the caller's actor and scope, the method,
status and reason in ``detail``). A burst of refusals from one caller is cut after
``BURST`` rows and then ``PER_MINUTE`` a minute, on the injected clock; the next row written
says how many were left out (``suppressed``), so a flood can neither fill the database nor go
unnoticed. The secret of a presented token is never written: an unknown token is
``anonymous``.

Writing the row never changes the answer: a database that cannot take it is logged and the
refusal is answered as before.
"""

# Decisions embodied here (docs/decisions.md):
# * “Refused calls are audited, rate-limited per caller”

from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from gps_dagster.api.errors import ApiError
from gps_dagster.api.limits import RateLimiter

log = logging.getLogger("gps_dagster.api")

AUDITED = frozenset({401, 403, 404, 409, 412, 428, 429})
BURST = 20
PER_MINUTE = 60.0
ANONYMOUS = "anonymous"


class RefusalLog:
    """Per-caller rate-limited writer of ``refused`` audit rows."""

    def __init__(self) -> None:
        self._limiter: RateLimiter | None = None
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    async def record(self, request: Request, err: ApiError) -> None:
        if err.status not in AUDITED:
            return
        try:
            await run_in_threadpool(self._write, request, err)
        except Exception:  # the answer stands; the trace is best effort, said so in the log
            log.warning(
                "could not audit the refused %s %s", request.method, request.url.path, exc_info=True
            )

    def _write(self, request: Request, err: ApiError) -> None:
        services = request.app.state.services
        who = getattr(request.state, "principal", None)
        actor = who.actor if who is not None else ANONYMOUS
        if self._limiter is None:
            self._limiter = RateLimiter(services.clock, burst=BURST, per_minute=PER_MINUTE)
        with self._lock:
            if not self._limiter.try_take(actor):
                self._suppressed[actor] = self._suppressed.get(actor, 0) + 1
                return
            suppressed = self._suppressed.pop(actor, 0)
        detail: dict[str, Any] = {
            "method": request.method,
            "status": err.status,
            "reason": err.reason,
        }
        if suppressed:
            detail["suppressed"] = suppressed
        services.store.add_audit(
            at=services.clock.now(),
            actor=actor,
            action="refused",
            kind="request",
            name=request.url.path[:200],
            scope=who.scope if who is not None else None,
            version=None,
            detail=detail,
        )
