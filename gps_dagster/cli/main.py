"""``gps-dagster``: validate schedules and print their timelines.

Exit codes: 0 ok, 1 invalid input (every problem printed with its field path,
never a traceback), 2 usage error (click's own). This is an edge of the
system, so it may read files and the clock, which it takes from the composition root
(``GPS_CLOCK``, else the wall clock); everything below it takes time as a parameter
(validation needs none: its verdict never depends on today).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

import click

from gps_dagster import __version__
from gps_dagster.cli import (
    apply_now_cmd,
    dry_run_cmd,
    engine_run_cmd,
    render,
    schedules_cmd,
    store_cmds,
)
from gps_dagster.cli.dagster_cmd import dagster_group
from gps_dagster.cli.examples_cmd import examples_cmd
from gps_dagster.cli.inputs import IsoDateTime, fail, load_pool_file, load_schedule_file
from gps_dagster.cli.nodeagent_cmd import node_agent
from gps_dagster.cli.pool_cmd import pool_group
from gps_dagster.cli.reservations_cmd import reservations_group
from gps_dagster.cli.serve_cmd import serve
from gps_dagster.cli.simulate_cmd import simulate_cmd
from gps_dagster.cli.tokens_cmd import tokens_group
from gps_dagster.domain.errors import GpsError, SpecInvalid, TemporaryError
from gps_dagster.domain.evaluator import intervals
from gps_dagster.domain.timeline import GpuSegment
from gps_dagster.domain.timeline_doc import build_timeline

MAX_RANGE = timedelta(days=3660)
"""Longest timeline the CLI computes in one call (ten years)."""


class ProductGroup(click.Group):
    """The root group: a product error no command caught is one line with its fix, exit 1.

    Commands catch what they expect; this is the owner of the rest (a database outage while
    listing, a core refusal in a read), so no user ever sees a traceback for them.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SpecInvalid as exc:
            fail(exc)
        except GpsError as exc:
            reason = getattr(exc, "reason", None) or type(exc).__name__
            fix = getattr(exc, "fix", None) or (
                "retry later" if isinstance(exc, TemporaryError) else "see the message"
            )
            click.echo(f"error: {reason} — {exc} — fix: {fix}", err=True)
            ctx.exit(1)


@click.group(cls=ProductGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gps-dagster")
def cli() -> None:
    """Share a GPU pool between model deployments by time of day."""
    import os
    from pathlib import Path

    from gps_dagster.cli.demo_hint import hint

    note = hint(Path.cwd(), os.environ)
    if note:
        click.echo(note, err=True)


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
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
        click.echo(
            f"{file}: ok — schedule '{schedule.name}', {len(schedule.targets)} target(s), "
            f"{len(schedule.windows)} window(s), time zone {schedule.timezone}"
        )


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
@click.option(
    "--from", "start", type=IsoDateTime(), required=True, help="Range start, RFC 3339 with offset."
)
@click.option(
    "--to",
    "end",
    type=IsoDateTime(),
    required=True,
    help="Range end (exclusive), RFC 3339 with offset.",
)
@click.option(
    "--pool",
    type=click.Path(exists=True, dir_okay=False),
    help="Pool file (GPUs per deploy, capacity): adds the desired-GPU line.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format; json is a contract read by other tools.",
)
@click.option(
    "--png",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw the timeline picture to this PNG file.",
)
def timeline(
    file: str, start: datetime, end: datetime, pool: str | None, fmt: str, png: str | None
) -> None:
    """Intent intervals per target of schedule FILE over [--from, --to), and desired GPUs vs
    capacity."""
    if end <= start:
        raise click.BadParameter("--to must be after --from", param_hint="--to")
    if end - start > MAX_RANGE:
        raise click.BadParameter(
            f"the range is longer than {MAX_RANGE.days} days", param_hint="--to"
        )
    try:
        schedule = load_schedule_file(file)
        pool_spec = load_pool_file(pool) if pool else None
        doc, gpu = build_timeline(schedule, pool_spec, start, end)
    except SpecInvalid as exc:
        fail(exc)
    click.echo(json.dumps(doc, indent=2) if fmt == "json" else render.timeline_table(doc))
    if gpu is not None:
        _warn_overcommit(gpu)
    if png:
        from gps_dagster.cli.timeline_png import (
            draw,  # matplotlib is slow to import: only when asked
        )

        draw(png, schedule, start, end, intervals(schedule, start, end), gpu, doc.get("ready_by"))
        click.echo(f"wrote {png}", err=True)


for _command in (
    schedules_cmd.schedules,
    store_cmds.status,
    store_cmds.gate,
    apply_now_cmd.apply_now,
    dry_run_cmd.dry_run_cmd,
    engine_run_cmd.engine_group,
    store_cmds.db,
    store_cmds.metrics,
    simulate_cmd,
    pool_group,
    reservations_group,
    dagster_group,
    serve,
    tokens_group,
    node_agent,
    examples_cmd,
):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> None:
    """Console script entry point: usage errors exit 2 (click), invalid input exits 1."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="gps-dagster")
    except SpecInvalid as exc:  # a command that did not catch it itself
        fail(exc)


if __name__ == "__main__":
    main()
