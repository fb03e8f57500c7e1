"""``gps-dagster dry-run``: the plan a schedule file would execute at an instant (submits
nothing)."""

from __future__ import annotations

import json
from datetime import datetime

import click

from gps_dagster.cli import wiring
from gps_dagster.cli.inputs import IsoDateTime, fail, load_schedule_file
from gps_dagster.cli.wiring import core_options
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.engine.dry_run import engine_dry_run
from gps_dagster.runtime import Settings, build_clock


@click.command("dry-run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--at", "at", type=IsoDateTime(), default=None, help="Instant to evaluate (default: now)."
)
@core_options
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def dry_run_cmd(file: str, at: datetime | None, settings: Settings, fmt: str) -> None:
    """The plan schedule FILE would execute at --at, and every warning; submits nothing."""
    clock = build_clock(settings)
    try:
        spec = load_schedule_file(file)
    except SpecInvalid as exc:
        fail(exc)
    rt = wiring.runtime(settings, clock=clock)
    rep = engine_dry_run(
        rt.store, rt.engine.planner.ready_by, spec, rt.core, at or rt.clock.now(), pool=rt.pool
    )
    if fmt == "json":
        click.echo(json.dumps(rep.as_dict(), indent=2))
        return
    click.echo(f"dry-run of '{spec.name}' at {rep.at.isoformat()} — nothing submitted")
    for target, intent in rep.intents.items():
        click.echo(
            f"  intent {target}: {intent['desired_state']} replicas={intent['replicas']} (source "
            f"{intent['source']})"
        )
        for note in intent.get("skipped", []):
            click.echo(f"    {note}")
    for s in rep.steps:
        click.echo(
            f"  step {s['order']:7} {s['step']:10} {s['target']}"
            + (f" capacity={s['capacity']}" if "capacity" in s else "")
            + (f" REFUSED {s['refused']}" if "refused" in s else "")
        )
    for lead in rep.ready_by or []:
        when = "in force" if lead.get("in_force") else "planned"
        click.echo(
            f"  ready-by {when}: early start {lead['early_start']} (lead {lead['lead_s']:.0f} s) — "
            f"{lead['reason']}"
        )
    for w in rep.warnings:
        click.echo(
            f"  warning: {w['kind']}: " + ", ".join(f"{k}={v}" for k, v in w.items() if k != "kind")
        )
    if not rep.steps and not rep.warnings:
        click.echo("  nothing to do: every target is already at its intent (no step would run)")
