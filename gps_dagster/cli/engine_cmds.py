"""``gps-dagster`` commands of the engine: schedules, status, gate, apply-now, dry-run, engine, db,
metrics.

Exit codes: 0 ok, 1 invalid input or a refusal (field path / reason / fix, no
traceback), 2 usage error, 3 busy (the 409 of R-PASS-2). These commands are
an edge: they read files and take their settings and their clock from the
composition root (``cli/wiring.py``: ``GPS_CLOCK`` runs them at a chosen
instant), and hand everything below them time as a parameter.
"""

# Decisions embodied here (docs/decisions.md):
# * “SIGTERM and SIGINT stop `engine run` gracefully”
# * “A stored interval ahead of the clock: reported with its fix, cleared by one command or a new
#   version”

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

import click

from gps_dagster.cli import render, wiring
from gps_dagster.cli.inputs import IsoDateTime, cli_actor, fail, load_schedule_file
from gps_dagster.cli.metrics_server import Heartbeat, MetricsServer
from gps_dagster.cli.wiring import core_options, store_options
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.engine import operations
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.dry_run import engine_dry_run
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.loop import EngineLoop, production_loop
from gps_dagster.engine.reports import PassReport, StepOutcome
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.runtime import Runtime, Settings, build_clock
from gps_dagster.store.errors import StoreError

EXIT_BUSY = 3


def refuse(exc: StoreError) -> NoReturn:
    path = getattr(exc, "path", "") or ""
    click.echo(
        f"error: {path + ': ' if path else ''}{exc.reason} — {exc} — fix: {exc.fix}", err=True
    )
    sys.exit(1)


# -- schedules -------------------------------------------------------------------------------


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
    if rt.store.get_gate() != "enforce":
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


# -- status, gate, metrics, db ------------------------------------------------------------------


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
@click.argument("value", required=False, type=click.Choice(["off", "observe", "enforce"]))
@store_options
def gate(value: str | None, settings: Settings) -> None:
    """Show or set the execution gate (off | observe | enforce)."""
    store = wiring.store(settings)
    if value is not None:
        store.set_gate(value, now=build_clock(settings).now())
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


# -- a frozen clock never mutates the core unless asked (R-NEXT-4) ----------------------------

FROZEN_CLOCK_WRITES = click.option(
    "--frozen-clock-writes",
    "frozen_writes",
    is_flag=True,
    envvar="GPS_CLOCK_WRITES",
    help="With GPS_CLOCK set: act on the core at that instant anyway (tests, a simulated "
    "what-if); env GPS_CLOCK_WRITES=1.",
)


def refuse_frozen_clock(settings: Settings, command: str, *, allowed: bool, what_if: str) -> None:
    """Exit 1 when ``command`` would submit steps to the core on a GPS_CLOCK instant.

    An instant left exported after a what-if planned that instant's intent on the real deploys,
    and time only moves forward (R-PASS-14): the present then planned nothing (R-NEXT-4).
    """
    if settings.clock is None or allowed:
        return
    click.echo(
        f"error: GPS_CLOCK: clock_frozen — `{command}` would act on the core as if it were "
        f"{settings.clock.isoformat()}, not now — fix: unset GPS_CLOCK (or GPS_CLOCK=wall); "
        f"{what_if} shows what it would do without writing; --frozen-clock-writes "
        "(GPS_CLOCK_WRITES=1) acts anyway",
        err=True,
    )
    sys.exit(1)


# -- apply-now, dry-run, engine run -------------------------------------------------------------


@click.command("apply-now")
@click.argument("name")
@core_options
@click.option(
    "--queue", is_flag=True, help="Only record the request for the Dagster apply-now sensor."
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="With --queue: wait up to this many seconds for the sensor's answer.",
)
@FROZEN_CLOCK_WRITES
def apply_now(
    name: str, settings: Settings, queue: bool, wait_s: float, frozen_writes: bool
) -> None:
    """Run a pass for schedule NAME now (exit 3 when another pass holds the lock: 409 busy)."""
    if not queue:
        refuse_frozen_clock(
            settings,
            "apply-now",
            allowed=frozen_writes,
            what_if=f"`dry-run` of {name}'s file --at that instant",
        )
    rt = wiring.runtime(settings)
    try:
        name = rt.store.resolve_name(name)
        if queue:
            request = rt.store.request_apply_now(name, now=rt.clock.now())
            click.echo(
                f"apply-now request {request} recorded for '{name}': the gps_apply_now "
                "sensor serves it within ~5 s (its tick names the run, or why none was "
                "needed)"
            )
            _await_answer(rt, request, wait_s)
            return
        report = operations.apply_now(rt.engine, rt.store, name, actor=cli_actor())
    except Busy as exc:
        click.echo(f"409 busy: {exc}", err=True)
        sys.exit(EXIT_BUSY)
    except StoreError as exc:
        refuse(exc)
    for outcome in report.schedules:
        click.echo(
            f"{outcome.schedule} v{outcome.version}: opened {len(outcome.opened)} plan(s), "
            f"refused {len(outcome.refused)}"
        )
    for line in step_lines(report.steps):
        click.echo(line)


def _await_answer(rt: Runtime, request: int, wait_s: float) -> None:
    """Poll the request's answer (the sensor writes it); exit 3 on 409 busy."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        answer = rt.store.get_apply_now(request)
        if answer.state != "pending":
            click.echo(f"apply-now request {request}: {answer.state}: {answer.result}")
            if answer.state == "busy":
                sys.exit(EXIT_BUSY)
            return
        if time.monotonic() >= deadline:
            if wait_s:
                click.echo(
                    f"apply-now request {request}: no answer within {wait_s:.0f} s (is "
                    "Dagster running? `make demo`, or dagster dev -f definitions.py)",
                    err=True,
                )
                sys.exit(1)
            return
        time.sleep(0.5)


def step_lines(steps: Sequence[StepOutcome]) -> list[str]:
    """One line per step, with where the pass left it.

    A pass may report a step more than once (submitted, then observed in the
    same pass): the operator wants its last outcome, in the order steps came.
    """
    last: dict[str, StepOutcome] = {}
    for step in steps:
        last[step.step_id] = step  # a dict keeps the first position of a key and the last value
    return [_step_line(step) for step in last.values()]


def _step_line(step: StepOutcome) -> str:
    return f"  {step.deploy_id}: {step.state}{' (' + step.reason + ')' if step.reason else ''}"


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
