"""``gps-dagster schedules``: create, update, list, show, delete, clear-skew, reclaim."""

# Decisions embodied here (docs/decisions.md):
# * “A stored interval ahead of the clock: reported with its fix, cleared by one command or a new
#   version”

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from gps_dagster.cli import render, wiring
from gps_dagster.cli.inputs import cli_actor, fail, load_schedule_file
from gps_dagster.cli.refusals import refuse
from gps_dagster.cli.wiring import core_options, store_options
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.step_state import Gate
from gps_dagster.engine import operations
from gps_dagster.engine.config import EngineConfig
from gps_dagster.runtime import Settings, build_clock
from gps_dagster.store.errors import StoreError


@click.group("schedules")
def schedules() -> None:
    """Create, update, list, show and delete deploy schedules."""


@schedules.command("apply")
@click.option(
    "-f",
    "--file",
    "file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Schedule file.",
)
@core_options
def schedules_apply(file: str, settings: Settings) -> None:
    """Create or update the schedule in FILE (validated whole; nothing persisted on any error)."""
    clock = build_clock(settings)
    try:
        spec = load_schedule_file(file)
    except SpecInvalid as exc:
        fail(exc)
    rt = wiring.runtime(settings, clock=clock)
    state = rt.store.schedule_state(spec.name)
    before = state[0] if state is not None else None
    try:
        record = operations.apply(
            rt.store, rt.core, spec, now=rt.clock.now(), actor=cli_actor(), source=file
        )
    except SpecInvalid as exc:
        fail(exc)
    except StoreError as exc:  # TargetOwned, ScheduleConflict (409)
        refuse(exc)
    if before == record.version:
        click.echo(f"schedule '{record.name}' unchanged: still version {record.version}")
    else:
        click.echo(
            f"applied schedule '{record.name}' version {record.version} ({len(spec.targets)} "
            "target(s))"
        )
    _request_reload()
    if rt.store.get_gate() != Gate.ENFORCE:
        click.echo(
            f"note: the execution gate is '{rt.store.get_gate()}': run `gps-dagster gate enforce` "
            "to act",
            err=True,
        )


def _request_reload() -> None:
    """R-DAG-1: with a webserver configured (GPS_DAGSTER_URL), reload the code location so the
    new schedule gets its boundary schedules now; the reconcile sensor serves it meanwhile."""
    url = os.environ.get("GPS_DAGSTER_URL")
    if not url:
        return
    from gps_dagster.cli.dagster_client import reload_code_location  # imports dagster: lazily

    location = os.environ.get("GPS_DAGSTER_LOCATION", "definitions.py")
    try:
        click.echo(f"dagster code location {location}: {reload_code_location(url, location)}")
    except (OSError, RuntimeError) as exc:
        click.echo(
            f"warning: could not reload the dagster code location ({exc}); the reconcile sensor "
            "still serves the schedule",
            err=True,
        )


@schedules.command("list")
@store_options
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def schedules_list(settings: Settings, fmt: str) -> None:
    """List schedules with their version, scope and targets."""
    records = wiring.store(settings).list_schedules()
    rows: list[dict[str, Any]] = [
        {
            "name": r.name,
            "version": r.version,
            "scope": r.spec.scope,
            "enabled": r.enabled,
            "mode": r.spec.mode.value,
            "targets": list(r.spec.target_ids),
        }
        for r in records
    ]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(
        render.table(
            ["NAME", "VERSION", "SCOPE", "MODE", "TARGETS"],
            [
                [r["name"], str(r["version"]), r["scope"], r["mode"], ", ".join(r["targets"])]
                for r in rows
            ],
        )
    )


@schedules.command("show")
@click.argument("name")
@store_options
def schedules_show(name: str, settings: Settings) -> None:
    """Print schedule NAME as stored (JSON)."""
    try:
        store = wiring.store(settings)
        record = store.get_schedule(store.resolve_name(name))
    except StoreError as exc:
        refuse(exc)
    click.echo(json.dumps({"version": record.version, **record.spec.to_document()}, indent=2))


@schedules.command("delete")
@click.argument("name")
@click.option(
    "--force", is_flag=True, help="Delete even with steps in flight (they are no longer tracked)."
)
@store_options
def schedules_delete(name: str, force: bool, settings: Settings) -> None:
    """Delete schedule NAME and release its claims (running deploys are left as they are).

    Refused (exit 1) while a step of NAME is in flight, unless --force.
    """
    try:
        store = wiring.store(settings)
        name = store.resolve_name(name)
        abandoned = operations.delete(
            store,
            name,
            now=build_clock(settings).now(),
            actor=cli_actor(),
            force=force,
        ).abandoned
    except StoreError as exc:
        refuse(exc)
    untracked = f"; no longer tracked: {', '.join(abandoned)}" if abandoned else ""
    click.echo(f"deleted schedule '{name}'{untracked}")


@schedules.command("clear-skew")
@click.argument("name")
@store_options
def schedules_clear_skew(name: str, settings: Settings) -> None:
    """Forget NAME's stored intervals that start more than max_clock_skew_s (5 s) ahead of now.

    A clock ahead (a fast replica, a GPS_CLOCK what-if left exported) stored a future interval;
    time only moves forward (R-PASS-14), so the present plans nothing until that instant, and
    every pass records a clock_skew event. Fix that clock first; this command then lets the next
    pass plan the present intent (applying a new version of the schedule does the same).
    """
    store = wiring.store(settings)
    try:
        name = store.resolve_name(name)
        store.get_schedule(name)
    except StoreError as exc:
        refuse(exc)
    cleared = store.clear_clock_skew(
        name, now=build_clock(settings).now(), bound_s=EngineConfig().max_clock_skew_s
    )
    if not cleared:
        click.echo(f"schedule '{name}': no stored interval ahead of now; nothing to clear")
        return
    click.echo(
        f"schedule '{name}': cleared the future intervals of {', '.join(cleared)}; "
        "the next pass plans the present intent"
    )


@schedules.command("reclaim")
@click.argument("name")
@click.argument("deploy_id")
@store_options
def schedules_reclaim(name: str, deploy_id: str, settings: Settings) -> None:
    """Accept the object that now carries DEPLOY_ID as schedule NAME's target.

    A claim is pinned to the object the engine first saw (on Kubernetes its uid); another object
    under the same id (deleted and re-created by GitOps or by hand) is ineligible{deploy_replaced}
    and never acted on. Check the new object is the workload you mean, then run this: the next
    pass pins the object it sees and acts on it (R-K8S-8).
    """
    store = wiring.store(settings)
    try:
        store.get_schedule(name)
        forgotten = store.reclaim(
            name, deploy_id, now=build_clock(settings).now(), actor=cli_actor()
        )
    except StoreError as exc:
        refuse(exc)
    except KeyError as exc:
        click.echo(
            f"error: deploy_id: not_claimed — {exc.args[0]} — fix: name a target of the "
            "schedule (`gps-dagster schedules show NAME`)",
            err=True,
        )
        sys.exit(1)
    was = f" (was {forgotten})" if forgotten else " (it was not pinned yet)"
    click.echo(
        f"schedule '{name}': {deploy_id} re-claimed{was}; the next pass pins the object "
        f"it sees; `gps-dagster apply-now {name}` re-plans the targets its refusal ended"
    )
