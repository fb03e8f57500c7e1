"""``gps-dagster dagster …``: talk to a running Dagster webserver (GraphQL).

* ``reload`` — reload the code location so that schedules applied since it
  loaded get their boundary schedules (R-DAG-1; the reconcile sensor serves
  them meanwhile);
* ``runs NAME`` — the transition runs of deploy schedule NAME (runs filtered
  by the ``gps/schedule`` tag), newest first.

Registered in ``cli/main.py``; dagster is imported only when a command runs.
Apply-now through Dagster is ``gps-dagster apply-now NAME --queue``: the
``gps_apply_now`` sensor serves the request (409 busy when the lock is held).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from gps_dagster.cli import wiring
from gps_dagster.cli.refusals import refuse
from gps_dagster.cli.wiring import store_options
from gps_dagster.runtime import Settings
from gps_dagster.store.errors import StoreError

URL_OPTION = click.option(
    "--url",
    default="http://127.0.0.1:3000",
    show_default=True,
    envvar="GPS_DAGSTER_URL",
    help="Dagster webserver URL ($GPS_DAGSTER_URL).",
)


@click.group("dagster")
def dagster_group() -> None:
    """The Dagster side: reload the code location, list transition runs."""


@dagster_group.command("reload")
@URL_OPTION
@click.option("--location", default="definitions.py", show_default=True, help="Code location name.")
def reload_cmd(url: str, location: str) -> None:
    """Reload the code location (boundary schedules of newly applied schedules)."""
    from gps_dagster.cli.dagster_client import reload_code_location  # imports dagster: lazily

    try:
        status = reload_code_location(url, location)
    except (OSError, RuntimeError) as exc:
        click.echo(f"reload failed: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{location}: {status}")


@dagster_group.command("runs")
@click.argument("name")
@URL_OPTION
@store_options
def runs_cmd(name: str, url: str, settings: Settings) -> None:
    """Transition runs of deploy schedule NAME (a tenant's bare name if one project has it)."""
    from gps_dagster.cli.dagster_client import runs_by_tag
    from gps_dagster.dagster_defs import names

    try:
        identity = wiring.store(settings).resolve_name(name)  # runs are tagged with the identity
    except StoreError as exc:
        refuse(exc)
    try:
        runs = runs_by_tag(url, names.TAG_SCHEDULE, identity)
    except (OSError, RuntimeError) as exc:
        click.echo(f"cannot read runs: {exc}", err=True)
        sys.exit(1)
    if not runs:
        click.echo(
            f"no transition run of '{identity}' on {url} yet (the first one appears at its next "
            "boundary, or run `gps-dagster apply-now NAME --queue`)"
        )
        return
    click.echo(
        f"{'RUN':8} {'STATUS':9} {'STARTED':25} {'PHASE':8} {'TRIGGER':14} {'SCHEDULE':24} TARGETS"
    )
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        started = (
            datetime.fromtimestamp(run["startTime"], UTC).isoformat(timespec="seconds")
            if run["startTime"]
            else "-"
        )
        click.echo(
            f"{run['runId'][:8]} {run['status']:9} {started:25} {tags.get(names.TAG_PHASE, ''):8} "
            f"{tags.get(names.TAG_TRIGGER, ''):14} {tags.get(names.TAG_SCHEDULE, identity):24} "
            f"{tags.get(names.TAG_TARGETS, '')}"
        )
