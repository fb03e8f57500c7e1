"""Loading schedule documents (JSON or YAML) into a validated ``Schedule``.

One entry point for every surface (CLI, store, Dagster code location) so a
schedule is accepted or refused the same way everywhere, with every problem
reported at once as ``SpecInvalid`` (field path + reason + fix).
"""

from __future__ import annotations

from typing import Any

from gps_dagster.domain.checks import schedule_checks
from gps_dagster.domain.documents import build, parse_text
from gps_dagster.domain.spec import WINDOW_TAGS, Schedule

__all__ = ["load_schedule", "parse_schedule"]


def load_schedule(data: Any, *, source: str = "<schedule>") -> Schedule:
    """Validate an already-parsed document (the verdict does not depend on today's date)."""
    return build(Schedule, data, source=source, tags=WINDOW_TAGS, checks=schedule_checks)


def parse_schedule(text: str, *, source: str = "<schedule>") -> Schedule:
    """Parse JSON or YAML text and validate it (see ``load_schedule``)."""
    return load_schedule(parse_text(text, source=source), source=source)
