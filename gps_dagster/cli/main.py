"""``gps-dagster``: validate schedules and print their timelines.

Exit codes: 0 ok, 1 invalid input (every problem printed with its field path,
never a traceback), 2 usage error (click's own). This is an edge of the
system, so it may read files and the wall clock (the horizon start of the
one-year checks); everything below it takes time as a parameter.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import click

from gps_dagster import __version__
from gps_dagster.cli import render
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.evaluator import intervals
from gps_dagster.domain.pool import PoolSpec, parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline import GpuSegment, gpu_timeline

MAX_RANGE = timedelta(days=3660)
"""Longest timeline the CLI computes in one call (ten years)."""


class IsoDateTime(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click stubs
    """An RFC 3339 instant with an offset (naive instants are ambiguous: refused)."""

    name = "ISO"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            parsed = value
        else:
            try:
                parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                self.fail(f"'{value}' is not an ISO 8601 instant, e.g. 2026-10-19T00:00:00+07:00", param, ctx)
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail(f"'{value}' has no UTC offset; add one, e.g. 2026-10-19T00:00:00+07:00", param, ctx)
        return parsed


def read_text(path: str) -> str:
    """File text; an unreadable file is invalid input (exit 1), not a traceback."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecInvalid([FieldError("", "unreadable_file", f"cannot read the file: {exc}")], source=path) from None


def load_schedule_file(path: str) -> Schedule:
    """Parse and validate a schedule file; the one-year checks start now (the CLI's clock)."""
    return parse_schedule(read_text(path), source=path, horizon_start=datetime.now(UTC))


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gps-dagster")
def cli() -> None:
    """Share a GPU pool between model deployments by time of day."""


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
def validate(file: str, fmt: str) -> None:
    """Check a schedule FILE (JSON or YAML); print every problem at once.

    Exit code 0 when valid, 1 when not.
    """
    try:
        schedule = load_schedule_file(file)
    except SpecInvalid as exc:
        fail(exc, fmt)
    if fmt == "json":
        click.echo(json.dumps(render.errors_json(file, ()), indent=2))
    else:
        click.echo(f"{file}: ok — schedule '{schedule.name}', {len(schedule.targets)} target(s), "
                   f"{len(schedule.windows)} window(s), time zone {schedule.timezone}")


def _warn_overcommit(gpu: list[GpuSegment]) -> None:
    for seg in gpu:
        if seg.overcommit:
            click.echo(
                f"warning: overcommit: {seg.desired_gpus} GPUs desired > capacity {seg.capacity} "
                f"from {render.iso(seg.start)} to {render.iso(seg.end)}",
                err=True,
            )


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--from", "start", type=IsoDateTime(), required=True, help="Range start, RFC 3339 with offset.")
@click.option("--to", "end", type=IsoDateTime(), required=True, help="Range end (exclusive), RFC 3339 with offset.")
@click.option("--pool", type=click.Path(exists=True, dir_okay=False),
              help="Pool file (GPUs per deploy, capacity): adds the desired-GPU line.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format; json is a contract read by other tools.")
@click.option("--png", type=click.Path(dir_okay=False, writable=True),
              help="Also draw the timeline picture to this PNG file.")
def timeline(file: str, start: datetime, end: datetime, pool: str | None, fmt: str, png: str | None) -> None:
    """Intent intervals per target of schedule FILE over [--from, --to), and desired GPUs vs capacity."""
    if end <= start:
        raise click.BadParameter("--to must be after --from", param_hint="--to")
    if end - start > MAX_RANGE:
        raise click.BadParameter(f"the range is longer than {MAX_RANGE.days} days", param_hint="--to")
    try:
        schedule = load_schedule_file(file)
        pool_spec = load_pool_file(pool) if pool else None
        rows = intervals(schedule, start, end)
        gpu = gpu_timeline(schedule, pool_spec, start, end) if pool_spec is not None else None
    except SpecInvalid as exc:
        fail(exc)
    doc = render.timeline_json(schedule, start, end, rows, gpu)
    click.echo(json.dumps(doc, indent=2) if fmt == "json" else render.timeline_table(doc))
    if gpu is not None:
        _warn_overcommit(gpu)
    if png:
        from gps_dagster.cli.timeline_png import (
            draw,  # matplotlib is slow to import: only when asked
        )

        draw(png, schedule, start, end, rows, gpu)
        click.echo(f"wrote {png}", err=True)


# --- Other command groups -------------------------------------------------------------
# Engineers add their groups here, e.g.:
#     from gps_dagster.cli.schedules import schedules
#     cli.add_command(schedules)
# --------------------------------------------------------------------------------------
def _register() -> None:
    from gps_dagster.cli import engine_cmds
    from gps_dagster.cli.pool_cmd import pool_group
    from gps_dagster.cli.simulate_cmd import simulate_cmd
    from gps_dagster.gps.cli import reservations_group

    for command in (
        engine_cmds.schedules, engine_cmds.status, engine_cmds.gate, engine_cmds.apply_now, engine_cmds.dry_run_cmd,
        engine_cmds.engine_group, engine_cmds.db, engine_cmds.metrics, simulate_cmd, pool_group, reservations_group,
    ):
        cli.add_command(command)


if __name__ != "__main__":  # run as `python -m`, this file is __main__: see the bottom
    _register()


def main(argv: Sequence[str] | None = None) -> None:
    """Console script entry point: usage errors exit 2 (click), invalid input exits 1."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="gps-dagster")
    except SpecInvalid as exc:  # a command that did not catch it itself
        fail(exc)


if __name__ == "__main__":
    # `python -m gps_dagster.cli.main`: use the canonical module, so command modules that
    # import helpers from gps_dagster.cli.main see one module, not a second partial copy.
    from gps_dagster.cli.main import main as _canonical_main

    _canonical_main()
