"""Instants and helpers of the CLI tests (the conftest pins ``GPS_CLOCK`` to ``MONDAY_1900``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from click.testing import CliRunner

from gps_dagster.cli.main import cli

MONDAY_1900 = "2026-10-19T19:00:00+07:00"
"""Outside the seed's business hours: A stopped, B running (as the seed pool file has them)."""
TUESDAY_1000 = "2026-10-20T10:00:00+07:00"
"""Inside the seed's business hours (03:00 UTC): A must run, B must stop."""


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def run(*args: str, at: str | None = None) -> Any:
    """``gps-dagster ARGS`` in process; ``at`` runs it at that instant (``GPS_CLOCK``)."""
    env = {"GPS_CLOCK": at} if at is not None else None
    return CliRunner().invoke(cli, list(args), env=env)
