"""``gps-dagster simulate``: replay a range through the real engine on the simulated pool."""

from __future__ import annotations

import json
from datetime import datetime

import click

from gps_dagster.cli import render
from gps_dagster.cli.inputs import IsoDateTime, fail, load_pool_file, load_schedule_file
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.engine.config import EngineConfig
from gps_dagster.simulation import SimulationReport, simulate


@click.command("simulate")
@click.argument("schedule_file", metavar="SCHEDULE", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--pool",
    "pool_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Pool file.",
)
@click.option(
    "--from", "start", type=IsoDateTime(), required=True, help="Range start, RFC 3339 with offset."
)
@click.option("--to", "end", type=IsoDateTime(), required=True, help="Range end (exclusive).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--png",
    type=click.Path(dir_okay=False, writable=True),
    help="Draw GPU usage and target states.",
)
@click.option(
    "--interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Engine pass interval (s).",
)
@click.option(
    "--fixed-interval",
    is_flag=True,
    help="Do not wake the engine at boundaries (measure tick lag).",
)
def simulate_cmd(
    schedule_file: str,
    pool_file: str,
    start: datetime,
    end: datetime,
    fmt: str,
    png: str | None,
    interval: float,
    fixed_interval: bool,
) -> None:
    """Replay [--from, --to) on the virtual clock: transitions, final phases, GPUs, downtime, idle,
    lag."""
    if end <= start:
        raise click.BadParameter("--to must be after --from", param_hint="--to")
    try:
        schedule = load_schedule_file(schedule_file)
        pool = load_pool_file(pool_file)
        report = simulate(
            schedule,
            pool,
            start,
            end,
            config=EngineConfig(pass_interval_s=interval),
            wake_at_boundaries=not fixed_interval,
        )
    except SpecInvalid as exc:
        fail(exc)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        click.echo(summary(report))
    if png:
        from gps_dagster.cli.simulate_png import draw

        draw(png, report)
        click.echo(f"wrote {png}", err=True)


def summary(report: SimulationReport) -> str:
    doc = report.as_dict()
    rows = []
    for tr in doc["transitions"]:
        for s in tr["steps"]:
            rows.append(
                [
                    tr["boundary"],
                    s["target"],
                    s["step"],
                    s["state"],
                    s["reason"] or "",
                    s["submitted_at"] or "",
                    s["finished_at"] or "",
                ]
            )
    lines = [
        f"simulate '{report.schedule}' on pool '{report.pool}' from {doc['from']} to {doc['to']} "
        f"({report.passes} passes)",
        render.table(
            ["BOUNDARY", "TARGET", "STEP", "STATE", "REASON", "SUBMITTED", "FINISHED"], rows
        ),
        "",
    ]
    lines.append(
        render.table(
            ["TARGET", "FINAL PHASE", "REASON"],
            [[t, s["phase"], s["reason"] or ""] for t, s in doc["final_status"].items()],
        )
    )
    for t, s in doc["final_status"].items():
        if s["fix"]:
            lines.append(f"  {t}: fix: {s['fix']}")
    lag = report.boundary_lag_seconds
    lines += [
        "",
        f"GPUs: max in use {report.max_gpus_in_use} / capacity {report.capacity} (max desired "
        f"{report.max_gpus_desired})",
        "downtime (aliased targets, intent running but nothing ready): "
        + (", ".join(f"{t} {v:.0f} s" for t, v in report.downtime_seconds.items()) or "none"),
        f"GPU idle during swaps: {report.gpu_idle_seconds / 60:.1f} GPU-minutes",
        "boundary lag (boundary -> first release submitted): "
        + (
            f"max {max(lag):.1f} s, mean {sum(lag) / len(lag):.1f} s over {len(lag)}"
            if lag
            else "no release"
        ),
    ]
    for r in doc["engine_restarts"]:
        lines.append(
            f"engine restarted at {r['at']}: the process crashed at {r['point']} "
            f"of {r['op']} (sim fault)"
        )
    for target, uuids in report.witness.items():
        lines.append(f"witness {target}: " + (", ".join(uuids) if uuids else "no ready replica"))
    return "\n".join(lines)
