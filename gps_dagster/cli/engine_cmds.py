"""``gps-dagster`` commands of the engine: schedules, status, gate, apply-now, dry-run, engine, db, metrics.

Exit codes: 0 ok, 1 invalid input or a refusal (field path / reason / fix, no
traceback), 2 usage error, 3 busy (the 409 of R-PASS-2). These commands are
an edge: they read files, the environment and the wall clock, and hand
everything below them time as a parameter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from datetime import UTC, datetime
from typing import Any, NoReturn

import click

from gps_dagster.cli import render
from gps_dagster.cli.inputs import IsoDateTime, fail, load_pool_file, load_schedule_file
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.dry_run import dry_run
from gps_dagster.engine.eligibility import declares_replicas, ineligible_reason
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.loop import EngineLoop, production_loop
from gps_dagster.engine.reports import PassReport
from gps_dagster.ports import NotFound
from gps_dagster.runtime import Runtime, build_runtime
from gps_dagster.store import Store
from gps_dagster.store.errors import StoreError, StoreUnavailable

EXIT_BUSY = 3
DB_OPTION = click.option("--db", "db_url", default=None, envvar="GPS_DB_URL",
                         help="Store URL (default: GPS_DB_URL or sqlite var/gps.sqlite).")
POOL_OPTION = click.option("--pool", "pool", default=None, envvar="GPS_POOL_FILE",
                           help="Simulated pool file (default: GPS_POOL_FILE or examples/seed-pool-10.yaml).")


def refuse(exc: StoreError) -> NoReturn:
    path = getattr(exc, "path", "") or ""
    click.echo(f"error: {path + ': ' if path else ''}{exc.reason} — {exc} — fix: {exc.fix}", err=True)
    sys.exit(1)


def _now() -> datetime:
    return datetime.now(UTC)


def _runtime(db_url: str | None, pool: str | None) -> Runtime:
    try:
        return build_runtime(db_url, pool)
    except SpecInvalid as exc:
        fail(exc)


# -- schedules -------------------------------------------------------------------------------

@click.group("schedules")
def schedules() -> None:
    """Create, update, list, show and delete deploy schedules."""


@schedules.command("apply")
@click.option("-f", "--file", "file", required=True, type=click.Path(exists=True, dir_okay=False), help="Schedule file.")
@DB_OPTION
@POOL_OPTION
def schedules_apply(file: str, db_url: str | None, pool: str | None) -> None:
    """Create or update the schedule in FILE (validated whole; nothing persisted on any error)."""
    try:
        spec = load_schedule_file(file)
    except SpecInvalid as exc:
        fail(exc)
    rt = _runtime(db_url, pool)
    problems = _scale_problems(rt, spec)
    if problems:
        fail(SpecInvalid(problems, source=file))
    try:
        record = rt.store.apply_schedule(spec, now=_now())
    except StoreError as exc:  # TargetOwned, ScheduleConflict (409)
        refuse(exc)
    click.echo(f"applied schedule '{record.name}' version {record.version} ({len(spec.targets)} target(s))")
    _request_reload()
    if rt.store.get_gate() != "enforce":
        click.echo(f"note: the execution gate is '{rt.store.get_gate()}': run `gps-dagster gate enforce` to act", err=True)


def _request_reload() -> None:
    """R-DAG-1: with a webserver configured (GPS_DAGSTER_URL), reload the code location so the
    new schedule gets its boundary schedules now; the reconcile sensor serves it meanwhile."""
    url = os.environ.get("GPS_DAGSTER_URL")
    if not url:
        return
    from gps_dagster.cli.devserver import reload_code_location  # imports dagster: lazily

    location = os.environ.get("GPS_DAGSTER_LOCATION", "definitions.py")
    try:
        click.echo(f"dagster code location {location}: {reload_code_location(url, location)}")
    except (OSError, RuntimeError) as exc:
        click.echo(f"warning: could not reload the dagster code location ({exc}); the reconcile sensor still serves the schedule", err=True)


def _scale_problems(rt: Runtime, spec: Any) -> list[FieldError]:
    """R-MODEL-7: replicas on a deploy kind that cannot scale fail at create/update too."""
    out = []
    for i, target in enumerate(spec.targets):
        if not declares_replicas(spec, target.model_deploy_id):
            continue
        try:
            deploy = rt.core.get_deploy(target.model_deploy_id)
        except NotFound:
            continue
        if ineligible_reason(spec, deploy) == "unsupported_scale_for_mode":
            out.append(FieldError(f"targets[{i}].model_deploy_id", "unsupported_scale_for_mode",
                                  f"{deploy.id} is a {deploy.kind.value} deploy that a schedule cannot scale: drop \"replicas\" for it"))
    return out


@schedules.command("list")
@DB_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def schedules_list(db_url: str | None, fmt: str) -> None:
    """List schedules with their version, scope and targets."""
    rows: list[dict[str, Any]] = [{"name": r.name, "version": r.version, "scope": r.spec.scope, "enabled": r.enabled,
             "mode": r.spec.mode.value, "targets": list(r.spec.target_ids)} for r in Store.open(db_url).list_schedules()]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(render.table(["NAME", "VERSION", "SCOPE", "MODE", "TARGETS"],
                            [[r["name"], str(r["version"]), r["scope"], r["mode"], ", ".join(r["targets"])] for r in rows]))


@schedules.command("show")
@click.argument("name")
@DB_OPTION
def schedules_show(name: str, db_url: str | None) -> None:
    """Print schedule NAME as stored (JSON)."""
    try:
        record = Store.open(db_url).get_schedule(name)
    except StoreError as exc:
        refuse(exc)
    click.echo(json.dumps({"version": record.version, **record.spec.to_document()}, indent=2))


@schedules.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True,
              help="Delete even with steps in flight (they are no longer tracked).")
@DB_OPTION
def schedules_delete(name: str, force: bool, db_url: str | None) -> None:
    """Delete schedule NAME and release its claims (running deploys are left as they are).

    Refused (exit 1) while a step of NAME is in flight, unless --force.
    """
    try:
        abandoned = Store.open(db_url).delete_schedule(name, now=_now(), force=force)
    except StoreError as exc:
        refuse(exc)
    untracked = f"; no longer tracked: {', '.join(abandoned)}" if abandoned else ""
    click.echo(f"deleted schedule '{name}'{untracked}")


# -- status, gate, metrics, db ------------------------------------------------------------------

@click.command("status")
@click.argument("name", required=False)
@DB_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(name: str | None, db_url: str | None, fmt: str) -> None:
    """Per target: phase, reason, fix text, interval, last action."""
    store = Store.open(db_url)
    rows: list[dict[str, Any]] = []
    for s in store.list_status(name):
        last = store.get_action(s.last_action) if s.last_action else None
        rows.append({
            "schedule": s.schedule, "target": s.deploy_id, "phase": s.phase, "reason": s.reason, "fix": s.fix,
            "interval_start": s.interval_start.isoformat() if s.interval_start else None,
            "interval_end": s.interval_end.isoformat() if s.interval_end else None,
            "intent": s.intent, "last_action": None if last is None else {"step": last.step, "state": last.state, "reason": last.reason},
            "since": s.phase_since.isoformat(),
        })
    if fmt == "json":
        click.echo(json.dumps({"gate": store.get_gate(), "targets": rows}, indent=2))
        return
    click.echo(f"execution gate: {store.get_gate()}")
    click.echo(render.table(
        ["SCHEDULE", "TARGET", "PHASE", "REASON", "INTERVAL START", "LAST ACTION"],
        [[r["schedule"], r["target"], r["phase"], r["reason"] or "", r["interval_start"] or "",
          "" if r["last_action"] is None else f"{r['last_action']['step']}:{r['last_action']['state']}"] for r in rows],
    ))
    for r in rows:
        if r["fix"]:
            click.echo(f"  {r['target']}: fix: {r['fix']}")


@click.command("gate")
@click.argument("value", required=False, type=click.Choice(["off", "observe", "enforce"]))
@DB_OPTION
def gate(value: str | None, db_url: str | None) -> None:
    """Show or set the execution gate (off | observe | enforce)."""
    store = Store.open(db_url)
    if value is not None:
        store.set_gate(value, now=_now())
    click.echo(f"execution gate: {store.get_gate()}")


@click.command("metrics")
@DB_OPTION
def metrics(db_url: str | None) -> None:
    """Print the engine metrics in Prometheus text format."""
    from gps_dagster.engine.metrics import render as render_metrics

    click.echo(render_metrics(Store.open(db_url)), nl=False)


@click.group("db")
def db() -> None:
    """The product's database."""


@db.command("upgrade")
@DB_OPTION
def db_upgrade(db_url: str | None) -> None:
    """Apply the Alembic migrations (also done automatically on first use)."""
    from gps_dagster.store import migrate

    store = Store.open(db_url, upgrade=False)
    click.echo(f"database at revision {migrate.upgrade(store.engine)}")


# -- apply-now, dry-run, engine run -------------------------------------------------------------

@click.command("apply-now")
@click.argument("name")
@DB_OPTION
@POOL_OPTION
@click.option("--queue", is_flag=True, help="Only record the request for the Dagster apply-now sensor.")
def apply_now(name: str, db_url: str | None, pool: str | None, queue: bool) -> None:
    """Run a pass for schedule NAME now (exit 3 when another pass holds the lock: 409 busy)."""
    rt = _runtime(db_url, pool)
    try:
        if queue:
            request = rt.store.request_apply_now(name, now=_now())
            click.echo(f"apply-now request {request} recorded for '{name}'")
            return
        report = rt.engine.run_pass(schedule=name, trigger="apply_now")
    except Busy as exc:
        click.echo(f"409 busy: {exc}", err=True)
        sys.exit(EXIT_BUSY)
    except StoreError as exc:
        refuse(exc)
    for outcome in report.schedules:
        click.echo(f"{outcome.schedule} v{outcome.version}: opened {len(outcome.opened)} plan(s), refused {len(outcome.refused)}")
    for step in report.steps:
        click.echo(f"  {step.deploy_id}: {step.state}{' (' + step.reason + ')' if step.reason else ''}")


@click.command("dry-run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--at", "at", type=IsoDateTime(), default=None, help="Instant to evaluate (default: now).")
@DB_OPTION
@POOL_OPTION
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def dry_run_cmd(file: str, at: datetime | None, db_url: str | None, pool: str | None, fmt: str) -> None:
    """The plan schedule FILE would execute at --at, and every warning; submits nothing."""
    try:
        spec = load_schedule_file(file)
        pool_spec = load_pool_file(pool) if pool else None
    except SpecInvalid as exc:
        fail(exc)
    rt = _runtime(db_url, pool)
    rep = dry_run(spec, rt.core, at or _now(), pool=pool_spec or _default_pool_spec())
    if fmt == "json":
        click.echo(json.dumps(rep.as_dict(), indent=2))
        return
    click.echo(f"dry-run of '{spec.name}' at {rep.at.isoformat()} — nothing submitted")
    for target, intent in rep.intents.items():
        click.echo(f"  intent {target}: {intent['desired_state']} replicas={intent['replicas']} (source {intent['source']})")
    for s in rep.steps:
        click.echo(f"  step {s['order']:7} {s['step']:10} {s['target']}"
                   + (f" capacity={s['capacity']}" if "capacity" in s else "") + (f" REFUSED {s['refused']}" if "refused" in s else ""))
    for w in rep.warnings:
        click.echo(f"  warning: {w['kind']}: " + ", ".join(f"{k}={v}" for k, v in w.items() if k != "kind"))


def _default_pool_spec() -> Any:
    from gps_dagster.runtime import pool_file

    try:
        return load_pool_file(str(pool_file()))
    except SpecInvalid:
        return None


@click.group("engine")
def engine_group() -> None:
    """The standalone reconcile engine."""


@engine_group.command("run")
@click.option("--once", is_flag=True, help="Run one pass and exit.")
@click.option("--interval", default=30.0, show_default=True, type=click.FloatRange(min=0.5), help="Seconds between passes.")
@click.option("--wake-at-boundaries/--fixed-interval", default=True, show_default=True,
              help="Also wake exactly at the next intent boundary instead of waiting for the next tick.")
@DB_OPTION
@POOL_OPTION
def engine_run(once: bool, interval: float, wake_at_boundaries: bool, db_url: str | None, pool: str | None) -> None:
    """Run passes forever (every --interval seconds), or once.

    A failed pass (a database outage included) is logged and the next tick tries again;
    SIGTERM or SIGINT stops the loop within a second (a second signal stops it at once).
    """
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rt = build_runtime(db_url, pool, config=EngineConfig(pass_interval_s=interval))
    except StoreUnavailable as exc:  # not up yet: a clear error, the supervisor restarts us
        click.echo(f"error: {exc.reason} — {exc} — fix: {exc.fix}", err=True)
        sys.exit(1)
    loop = production_loop(
        rt.engine, clock=rt.clock, interval_s=interval, wake_at_boundaries=wake_at_boundaries,
        on_pass=_print_pass, on_error=lambda exc: click.echo(f"pass failed: {exc}", err=True),
    )

    def _on_signal(_signum: int, _frame: object) -> None:
        if loop.stopping:
            raise KeyboardInterrupt
        loop.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with contextlib.suppress(KeyboardInterrupt):  # the second signal: stop now
        loop.run(max_passes=1 if once else None)
    if not once:
        click.echo("stopped", err=True)
    if once and loop.failures:
        sys.exit(1)


def _print_pass(report: PassReport) -> None:
    click.echo(f"{report.at.isoformat()} gate={report.gate} busy={report.busy} "
               f"plans={sum(len(s.opened) for s in report.schedules)} steps={len(report.steps)} "
               f"errors={len(report.errors)}")
    for error in report.errors:
        click.echo(f"  error: {error}", err=True)


def sleep_for(rt: Runtime, interval: float) -> float:
    """Seconds until the next pass: the interval, or sooner if a boundary comes first."""
    return EngineLoop(rt.engine, clock=rt.clock, interval_s=interval).next_wait()
