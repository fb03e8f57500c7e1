"""Loading schedule documents (JSON or YAML) into a validated ``Schedule``.

One entry point for every surface (CLI, store, Dagster code location) so a
schedule is accepted or refused the same way everywhere, with every problem
reported at once as ``SpecInvalid`` (field path + reason + fix).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gps_dagster.domain.checks import schedule_checks
from gps_dagster.domain.documents import build, parse_text
from gps_dagster.domain.spec import WINDOW_TAGS, Schedule

__all__ = ["load_schedule", "parse_schedule"]


def load_schedule(data: Any, *, source: str = "<schedule>", horizon_start: datetime) -> Schedule:
    """Validate an already-parsed document; cross-field checks look one year ahead of ``horizon_start``."""
    if horizon_start.tzinfo is None or horizon_start.utcoffset() is None:
        raise ValueError("horizon_start must be an aware datetime")
    return build(Schedule, data, source=source, tags=WINDOW_TAGS, checks=schedule_checks(horizon_start))


def parse_schedule(text: str, *, source: str = "<schedule>", horizon_start: datetime) -> Schedule:
    """Parse JSON or YAML text and validate it (see ``load_schedule``)."""
    return load_schedule(parse_text(text, source=source), source=source, horizon_start=horizon_start)
