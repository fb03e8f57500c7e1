"""Reading user input at the CLI edge: instants, schedule and pool files, error printing.

Every user mistake becomes ``SpecInvalid`` (exit 1, every problem with its
field path) or a click usage error (exit 2) — never a traceback.
"""

# Decisions embodied here (docs/decisions.md):
# * “One-shot instants lie in [1970-01-01, 9000-01-01)”

from __future__ import annotations

import getpass
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from gps_dagster.cli import render
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.pool import PoolSpec, parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.spec import EARLIEST, LATEST, Schedule


class IsoDateTime(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click stubs
    """An RFC 3339 instant with an offset (naive instants are ambiguous: refused)."""

    name = "ISO"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            parsed = value
        else:
            try:
                parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                self.fail(
                    f"'{value}' is not an ISO 8601 instant, e.g. 2026-10-19T00:00:00+07:00",
                    param,
                    ctx,
                )
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail(
                f"'{value}' has no UTC offset; add one, e.g. 2026-10-19T00:00:00+07:00", param, ctx
            )
        if not EARLIEST <= parsed < LATEST:
            self.fail(f"'{value}' is outside {EARLIEST.date()} .. {LATEST.date()}", param, ctx)
        return parsed


def cli_actor() -> str:
    """Who acts through the CLI, for the audit log: ``cli:<OS user>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def read_text(path: str) -> str:
    """File text; an unreadable file is invalid input (exit 1), not a traceback."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecInvalid(
            [FieldError("", "unreadable_file", f"cannot read the file: {exc}")], source=path
        ) from None


def load_schedule_file(path: str) -> Schedule:
    """Parse and validate a schedule file (the verdict does not depend on today)."""
    return parse_schedule(read_text(path), source=path)


def load_pool_file(path: str) -> PoolSpec:
    return parse_pool(read_text(path), source=path)


def fail(exc: SpecInvalid, fmt: str = "text") -> NoReturn:
    """Print every problem and exit 1."""
    source = exc.source or "<input>"
    if fmt == "json":
        click.echo(json.dumps(render.errors_json(source, exc.errors), indent=2))
    else:
        click.echo(render.errors_text(source, exc.errors), err=True)
    sys.exit(1)
