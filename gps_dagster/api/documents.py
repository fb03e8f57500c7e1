"""Turning request bodies and parameters into domain values, with the CLI's error shapes.

A schedule body goes through the same ``load_schedule`` as a schedule file,
after the surface has had its say: the scope is the surface's (a body naming
another scope is refused, not silently moved), the name is the path's, and
on the tenant surface the placement fields a tenant may not choose (queue,
node name: the server derives them, seed Q5) are dropped and reported back
as warnings.
"""

# Decisions embodied here (docs/decisions.md):
# * “One URL per schedule”
# * “If-Match is optional”
# * “If-Match takes ASCII digits only”
# * “Instants in requests are bounded as documents bound them”
# * “If-Match is required on the tenant surface, optional on the admin one”

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.api.errors import ApiError
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import EARLIEST, LATEST, Schedule
from gps_dagster.store.repository import MUST_NOT_EXIST

PLACEMENT_FIELDS = frozenset(
    {"queue", "queue_name", "node", "node_name", "nodeName", "node_selector", "nodeSelector"}
)
SOURCE = "request body"


def drop_placement(doc: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
    """A copy of ``doc`` without tenant placement fields, and a warning per dropped field."""
    dropped: list[FieldError] = []

    def clean(obj: Any, path: str) -> Any:
        if not isinstance(obj, dict):
            return obj
        out = {}
        for key, value in obj.items():
            if key in PLACEMENT_FIELDS:
                dropped.append(
                    FieldError(
                        f"{path}.{key}" if path else str(key),
                        "dropped_placement_field",
                        "the server derives queue and node placement; remove the field",
                    )
                )
            else:
                out[key] = value
        return out

    top = clean(doc, "")
    for key in ("targets", "windows"):
        if isinstance(top.get(key), list):
            top[key] = [clean(item, f"{key}[{i}]") for i, item in enumerate(top[key])]
    for i, win in enumerate(top.get("windows") or []):
        if isinstance(win, dict) and isinstance(win.get("states"), list):
            win["states"] = [
                clean(st, f"windows[{i}].states[{j}]") for j, st in enumerate(win["states"])
            ]
    return top, dropped


def schedule_from_body(
    body: dict[str, Any],
    *,
    scope: str,
    now: datetime,
    name: str | None = None,
) -> tuple[Schedule, list[FieldError]]:
    """Validate a schedule body for the surface of ``scope`` (warnings: fields dropped)."""
    doc, warnings = drop_placement(body) if scope != "admin" else (dict(body), [])
    problems = []
    if doc.get("scope", scope) != scope:
        fix = (
            "create tenant schedules through /api/v1/cmp/projects/<project>/deploy-schedules"
            if scope == "admin"
            else f"omit scope, or use '{scope}' on this surface"
        )
        problems.append(FieldError("scope", "scope_mismatch", fix))
    qualified = name if name is None or scope == "admin" else f"{scope[4:]}/{name}"
    if name is not None and doc.get("name", name) not in (name, qualified):
        problems.append(
            FieldError(
                "name", "name_mismatch", f"omit name, or use '{name}' (the name in the path)"
            )
        )
    if problems:
        raise SpecInvalid(problems, source=SOURCE)
    doc["scope"] = scope
    if name is not None:
        doc["name"] = name
    return load_schedule(doc, source=SOURCE), warnings


_VERSION = re.compile(r"[0-9]{1,18}")
"""A version in If-Match: ASCII digits, small enough for the store's BIGINT."""


def expected_version(
    if_match: str | None, *, create: bool = False, required: bool = False
) -> int | None:
    """The version an ``If-Match`` header names (``"3"``, ``W/"3"``, ``3``); None without one.

    ``required`` (the tenant surface, R-API): no header is ``428 Precondition
    Required`` — a stale editor must not silently overwrite a newer version (Kubernetes-style
    optimistic concurrency); ``*`` says "whatever is stored" on purpose.
    """
    if create:
        return MUST_NOT_EXIST
    if if_match is None and required:
        raise ApiError(
            428,
            "precondition_required",
            "a change of a schedule needs If-Match",
            'GET the schedule and send its ETag back, e.g. If-Match: "3" '
            "(or If-Match: * to overwrite whatever is stored)",
            path="If-Match",
        )
    if if_match is None or if_match.strip() == "*":
        return None
    raw = if_match.strip().removeprefix("W/").strip('"')
    if (
        _VERSION.fullmatch(raw) is None or int(raw) < 1
    ):  # ASCII only: '²'.isdigit() but int('²') fails
        raise ApiError(
            400,
            "invalid_if_match",
            f"If-Match '{if_match[:40]}' names no schedule version",
            'send the version you read, e.g. If-Match: "3" (the ETag of GET)',
        )
    return int(raw)


def instant(value: str | None, name: str) -> datetime | None:
    """An RFC 3339 query parameter; a '+' decoded to a space by the query string is forgiven."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace(" ", "+").replace("Z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.utcoffset() is None:
        raise ApiError(
            400,
            "invalid_instant",
            f"{name}={value[:60]!r} is not an instant with a UTC offset",
            f"use RFC 3339 with an offset, e.g. {name}=2026-10-19T00:00:00%2B07:00",
            path=name,
        )
    if not EARLIEST <= parsed < LATEST:  # year 1 or 9999 overflowed the evaluator (R-MODEL-7)
        raise ApiError(
            400,
            "instant_out_of_range",
            f"{name}={value[:60]!r} is out of range",
            f"use an instant from {EARLIEST.date()} to before {LATEST.date()}",
            path=name,
        )
    return parsed


def checked_range(start: datetime, end: datetime, *, max_days: int) -> None:
    if end <= start:
        raise ApiError(
            400, "empty_range", "'to' must be after 'from'", "swap or widen the range", path="to"
        )
    if end - start > timedelta(days=max_days):
        raise ApiError(
            400,
            "range_too_long",
            f"the range is longer than {max_days} days",
            f"ask for at most {max_days} days per request (page by week)",
            path="to",
        )


def week_of(now: datetime, schedule: Schedule) -> tuple[datetime, datetime]:
    """Monday 00:00 to the next Monday, in the schedule's zone: the timeline page's default week."""
    local = now.astimezone(schedule.tz)
    monday = (local - timedelta(days=local.weekday())).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return monday, monday + timedelta(days=7)
