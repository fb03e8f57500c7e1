"""Small builders shared by the domain tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule


def at(tz: str, *parts: int, fold: int = 0) -> datetime:
    """A local wall time in ``tz`` (``fold=1`` = the second of a repeated wall time)."""
    return datetime(*parts, tzinfo=ZoneInfo(tz), fold=fold)  # type: ignore[misc]


def schedule(
    windows: list[dict[str, Any]], *, tz: str = "UTC", targets: list[dict[str, Any]] | None = None
) -> Schedule:
    """A valid schedule (every check run) with targets a (default stopped) and b (default
    running)."""
    doc = {
        "name": "t",
        "timezone": tz,
        "targets": targets
        or [
            {"model_deploy_id": "a", "default_state": "stopped"},
            {"model_deploy_id": "b", "default_state": "running"},
        ],
        "windows": windows,
    }
    return load_schedule(doc)


def recurring(
    name: str,
    cron: str,
    duration: str,
    *,
    priority: int = 10,
    a: str = "running",
    b: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    states: list[dict[str, Any]] = [{"model_deploy_id": "a", "desired_state": a, **extra}]
    if b is not None:
        states.append({"model_deploy_id": "b", "desired_state": b})
    return {
        "name": name,
        "kind": "recurring",
        "priority": priority,
        "cron": cron,
        "duration": duration,
        "states": states,
    }


def one_shot(
    name: str, start: str, end: str, *, priority: int = 100, a: str = "stopped"
) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "one_shot",
        "priority": priority,
        "active_from": start,
        "active_until": end,
        "states": [{"model_deploy_id": "a", "desired_state": a}],
    }
