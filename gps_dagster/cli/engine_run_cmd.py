"""``gps-dagster engine run``: the standalone reconcile loop (or one pass, or a read-only what-if),
with its metrics server."""

# Decisions embodied here (docs/decisions.md):
# * “SIGTERM and SIGINT stop `engine run` gracefully”

from __future__ import annotations

import contextlib
import logging
import signal
import sys

import click

from gps_dagster.cli import wiring
from gps_dagster.cli.metrics_server import Heartbeat, MetricsServer
from gps_dagster.cli.refusals import FROZEN_CLOCK_WRITES, refuse_frozen_clock
from gps_dagster.cli.wiring import core_options
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.dry_run import engine_dry_run
from gps_dagster.engine.loop import EngineLoop, production_loop
from gps_dagster.engine.reports import PassReport
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.runtime import Runtime, Settings


@click.group("engine")
def engine_group() -> None:
    """The standalone reconcile engine."""


@engine_group.command("run")
@click.option("--once", is_flag=True, help="Run one pass and exit.")
@click.option(
    "--interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.5),
    help="Seconds between passes.",
)
@click.option(
    "--wake-at-boundaries/--fixed-interval",
    default=True,
    show_default=True,
    help="Also wake exactly at the next intent boundary instead of waiting for the next tick.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve /metrics (Prometheus) and /healthz (pass loop alive) on this port.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address of the metrics server (0.0.0.0 in a pod).",
)
@click.option(
    "--what-if",
    "what_if",
    is_flag=True,
    help="Read-only: print each schedule's plan at the runtime's clock (GPS_CLOCK); "
    "nothing is written, nothing submitted.",
)
@FROZEN_CLOCK_WRITES
@core_options
def engine_run(
    once: bool,
    interval: float,
    wake_at_boundaries: bool,
    metrics_port: int | None,
    metrics_host: str,
    what_if: bool,
    frozen_writes: bool,
    settings: Settings,
) -> None:
    """Run passes forever (every --interval seconds), or once.

    A failed pass (a database outage included) is logged and the next tick tries again;
    SIGTERM or SIGINT stops the loop within a second (a second signal stops it at once).
    With GPS_CLOCK set it refuses (exit 1) unless --what-if or --frozen-clock-writes.
    """
    if what_if:
        _what_if(settings)
        return
    if settings.clock is not None and not once:
        raise click.UsageError(
            "GPS_CLOCK is a frozen instant: no boundary would ever come; "
            "run `engine run --once`, or set GPS_CLOCK=wall"
        )
    refuse_frozen_clock(
        settings, "engine run", allowed=frozen_writes, what_if="`engine run --what-if`"
    )
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # a store that is not up yet is a clear error (exit 1): the supervisor restarts us
    rt = wiring.runtime(settings, config=EngineConfig(pass_interval_s=interval))
    beat = Heartbeat(stale_after_s=3 * interval + 300)  # a long pass on a slow database is alive

    def on_pass(report: PassReport) -> None:
        beat.beat()
        _print_pass(report)

    def on_error(exc: Exception) -> None:
        beat.beat()  # alive: the loop survived the failure and will try again
        click.echo(f"pass failed: {exc}", err=True)

    loop = production_loop(
        rt.engine,
        clock=rt.clock,
        interval_s=interval,
        wake_at_boundaries=wake_at_boundaries,
        on_pass=on_pass,
        on_error=on_error,
        wakeup=_wakeup(rt),
    )
    server = _metrics_server(rt, metrics_host, metrics_port, beat)

    def _on_signal(_signum: int, _frame: object) -> None:
        if loop.stopping:
            raise KeyboardInterrupt
        loop.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # the second signal: stop now
            loop.run(max_passes=1 if once else None)
    finally:
        if server is not None:
            server.stop()
    if not once:
        click.echo("stopped", err=True)
    if once and loop.failures:
        sys.exit(1)


def _wakeup(rt: Runtime) -> Wakeup | None:
    """The loop's wake-up when the core can watch the cluster (the Kubernetes watch cache)."""
    subscribe = getattr(rt.core, "subscribe", None)  # beyond the port, if offered
    if not callable(subscribe):
        return None
    wakeup = Wakeup()
    return wakeup if subscribe(wakeup.notify) else None


def _core_metrics(rt: Runtime) -> str:
    """The core's own gauges of this process (the watch cache's age), if it offers any."""
    text = getattr(rt.core, "metrics_text", None)
    return str(text()) if callable(text) else ""


def _what_if(settings: Settings) -> None:
    """Every stored schedule's dry-run at the runtime's clock: reads only (R-K8S-7, R-NEXT-4)."""
    rt = wiring.runtime(settings)
    at = rt.clock.now()
    click.echo(f"what-if at {at.isoformat()} — nothing written, nothing submitted")
    for record in rt.store.list_schedules():
        rep = engine_dry_run(
            rt.store, rt.engine.planner.ready_by, record.spec, rt.core, at, pool=rt.pool
        )
        steps = ", ".join(f"{s['step']} {s['target']}" for s in rep.steps) or "nothing to do"
        click.echo(f"  {record.name} v{record.version}: {steps}")


def _metrics_server(
    rt: Runtime, host: str, port: int | None, beat: Heartbeat
) -> MetricsServer | None:
    if port is None:
        return None
    from gps_dagster.engine.metrics import render as render_metrics

    try:
        server = MetricsServer(
            lambda: render_metrics(rt.store) + _core_metrics(rt),
            host=host,
            port=port,
            alive=beat.alive,
        )
    except OSError as exc:
        raise click.UsageError(
            f"--metrics-port {port}: cannot listen on {host}:{port} ({exc})"
        ) from exc
    click.echo(f"metrics on http://{host}:{server.port}/metrics", err=True)
    return server.start()


def _print_pass(report: PassReport) -> None:
    click.echo(
        f"{report.at.isoformat()} gate={report.gate} busy={report.busy} "
        f"plans={sum(len(s.opened) for s in report.schedules)} steps={len(report.steps)} "
        f"errors={len(report.errors)}"
    )
    for error in report.errors:
        click.echo(f"  error: {error}", err=True)


def sleep_for(rt: Runtime, interval: float) -> float:
    """Seconds until the next pass: the interval, or sooner if a boundary comes first."""
    return EngineLoop(rt.engine, clock=rt.clock, interval_s=interval).next_wait()
