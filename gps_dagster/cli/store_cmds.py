"""``gps-dagster status``, ``gate``, ``metrics`` and ``db``: what the store holds."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from gps_dagster.cli import render, wiring
from gps_dagster.cli.refusals import refuse
from gps_dagster.cli.wiring import store_options
from gps_dagster.domain.step_state import Gate
from gps_dagster.engine import operations
from gps_dagster.engine.config import EngineConfig
from gps_dagster.runtime import Settings, build_clock
from gps_dagster.store.errors import StoreError


@click.command("status")
@click.argument("name", required=False)
@store_options
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def status(name: str | None, settings: Settings, fmt: str) -> None:
    """Per target: phase, reason, fix text, interval, last action."""
    store = wiring.store(settings)
    try:
        name = None if name is None else store.resolve_name(name)
    except StoreError as exc:
        refuse(exc)
    rows = operations.status_rows(store, name)
    if fmt == "json":
        click.echo(json.dumps({"gate": store.get_gate(), "targets": rows}, indent=2))
        return
    click.echo(f"execution gate: {store.get_gate()}")
    click.echo(
        render.table(
            ["SCHEDULE", "TARGET", "PHASE", "REASON", "INTERVAL START", "LAST ACTION"],
            [
                [
                    r["schedule"],
                    r["target"],
                    r["phase"],
                    r["reason"] or "",
                    r["interval_start"] or "",
                    ""
                    if r["last_action"] is None
                    else f"{r['last_action']['step']}:{r['last_action']['state']}",
                ]
                for r in rows
            ],
        )
    )
    for r in rows:
        if r["fix"]:
            click.echo(f"  {r['target']}: fix: {r['fix']}")


@click.command("gate")
@click.argument("value", required=False, type=click.Choice([g.value for g in Gate]))
@store_options
def gate(value: str | None, settings: Settings) -> None:
    """Show or set the execution gate (off | observe | enforce)."""
    store = wiring.store(settings)
    if value is not None:
        store.set_gate(Gate(value), now=build_clock(settings).now())
    click.echo(f"execution gate: {store.get_gate()}")


@click.command("metrics")
@store_options
def metrics(settings: Settings) -> None:
    """Print the engine metrics in Prometheus text format."""
    from gps_dagster.engine.metrics import render as render_metrics

    click.echo(render_metrics(wiring.store(settings)), nl=False)


@click.group("db")
def db() -> None:
    """The product's database."""


@db.command("upgrade")
@store_options
def db_upgrade(settings: Settings) -> None:
    """Apply the Alembic migrations (also done automatically on first use)."""
    from gps_dagster.runtime import open_store
    from gps_dagster.store import migrate

    store = open_store(settings, upgrade=False)
    click.echo(f"database at revision {migrate.upgrade(store.engine)}")


@db.command("prune")
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    default=None,
    help="Days of finished history to keep (default: the retention, 30).",
)
@store_options
def db_prune(days: float | None, settings: Settings) -> None:
    """Delete finished plans, steps and events older than the retention (never one in flight)."""
    from gps_dagster.store.retention import prune

    keep = EngineConfig().retention_days if days is None else days
    now = build_clock(settings).now()
    done = prune(wiring.store(settings).engine, before=now - timedelta(days=keep))
    click.echo(
        f"pruned history older than {keep:g} day(s): {done.transitions} plan(s), "
        f"{done.actions} step(s), {done.events} event(s), {done.requests} apply-now request(s)"
    )
