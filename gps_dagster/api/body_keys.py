"""Duplicate keys in a JSON request body are refused at their paths (R-MODEL-7).

FastAPI decodes a JSON body with Python's ``json.loads`` before any endpoint sees it, and that
decoder keeps the *last* of two equal keys: ``{"timezone": "UTC", "timezone": "Asia/Tokyo"}``
silently became Tokyo, where the same text in a file is refused (``duplicate_key``). A route of
this class re-reads the body it has already received (Starlette caches it) with the product's
own parser (``documents.parse_text``, which keeps every key as ``Pairs``) and, when a key is
given twice, answers the ``422 invalid_document`` every other document problem gets: each
duplicate at its field path, and — the rest kept — a schedule body's other field errors beside
them. Bodies without duplicates go through untouched; undecodable ones stay FastAPI's (400
``invalid_json``).
"""

# Decisions embodied here (docs/decisions.md):
# * “A key given twice in an API body is refused, not last-wins (R-MODEL-7)”

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from gps_dagster.domain import documents
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.schedules import load_schedule

SOURCE = "request body"
DUPLICATE = "duplicate_key"


def duplicate_keys(raw: bytes, *, schedule: bool) -> list[FieldError]:
    """Every duplicate key of ``raw`` at its path, plus (``schedule``) the document's other
    problems; empty when no key is given twice or the text is not a JSON document."""
    try:
        parsed = documents.parse_text(raw.decode("utf-8"), source=SOURCE)
    except (SpecInvalid, UnicodeDecodeError):
        return []  # not a document at all: FastAPI's own answer stands
    settled, problems = documents.settle(parsed)
    duplicates = [p for p in problems if p.reason == DUPLICATE]
    if not duplicates:
        return []
    found = list(problems)
    if schedule and isinstance(settled, dict):
        try:
            load_schedule(settled, source=SOURCE)
        except SpecInvalid as exc:
            found += [e for e in exc.errors if e not in found]
    return found


class DocumentRoute(APIRoute):
    """An API route whose JSON body is refused when it gives a key twice (see the module)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        schedule = re.search(r"/deploy-schedules(/\{name[^}]*\})?$", self.path) is not None

        async def checked(request: Request) -> Response:
            if request.method in ("POST", "PUT", "PATCH"):
                raw = await request.body()
                problems = duplicate_keys(raw, schedule=schedule) if raw else []
                if problems:
                    raise SpecInvalid(problems, source=SOURCE)
            return await handler(request)

        return checked
