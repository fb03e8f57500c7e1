"""``gps-dagster pool``: look at the simulated GPU pool, and act on it by hand.

``pool show --pool FILE`` loads a pool file into a throw-away SQLite database
and prints it as placed at load time; without ``--pool`` it prints the pool(s)
of the configured store (``GPS_DB_URL`` / ``--db``), as the engine sees them.
Both read the pool at the runtime's clock (``GPS_CLOCK``, else the wall clock).

``pool stop|start|scale DEPLOY`` are an operator's manual actions: the same core operations
the engine submits (``Stop`` with typed alias consent, ``Start``, ``SetReplicaIntent``), with
the deploy's current ETag and a fresh idempotency key, through the core's own admission
(quota, reservation VRAM budget: a manual start is refused like the engine's would be). The
engine sees them as what they are: after convergence, a manual change is ``drift_detected``,
respected and not reverted until the intent changes (SPEC R-PASS-5, U1).
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gps_dagster.backends.sim import PoolSnapshot, SimPool, snapshot
from gps_dagster.cli import render, wiring
from gps_dagster.cli.inputs import fail
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.pool import parse_pool
from gps_dagster.ports import Clock, CoreError, NotFound
from gps_dagster.runtime import SettingsInvalid, build_clock, db_url
from gps_dagster.store.db import create_db_engine


@click.group("pool")
def pool_group() -> None:
    """The simulated GPU pool (nodes, GPUs, deploys)."""


@pool_group.command("show")
@click.option("--pool", "pool_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="A pool file (YAML/JSON).")
@click.option("--db", "db", default=None,
              help="Database URL of the store (default: GPS_DB_URL or var/gps.sqlite).")
@wiring.BACKEND_OPTIONS[0]
@wiring.BACKEND_OPTIONS[1]
@wiring.BACKEND_OPTIONS[2]
@click.option("--name", default=None, help="Pool name in the store (default: every pool).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def show(pool_file: Path | None, db: str | None, backend: str | None, kubeconfig: str | None,
         kube_context: str | None, name: str | None, fmt: str) -> None:
    """Print nodes, GPUs (UUID -> holder) and deploys."""
    settings = wiring.settings(db_url=db, backend=backend, kubeconfig=kubeconfig,
                               kube_context=kube_context)
    if settings.backend != "sim":
        fail(SettingsInvalid([FieldError(
            "--backend", "pool_show_sim_only",
            f"`pool show` reads the simulated pool, not {settings.backend}: list the cluster's "
            "nodes and pods with kubectl (kubectl get nodes,pods -A)",
        )]))
    clock = build_clock(settings)
    try:
        if pool_file:
            snaps = _from_file(pool_file, clock)
        else:
            snaps = _from_store(db_url(settings), name, clock)
    except SpecInvalid as exc:
        raise click.ClickException(str(exc)) from None
    except NotFound as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        data = [s.as_dict() for s in snaps]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
        return
    click.echo("\n\n".join(render_table(s) for s in snaps))


def _from_file(path: Path, clock: Clock) -> list[PoolSnapshot]:
    spec = parse_pool(path.read_text(), source=str(path))
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_db_engine(f"sqlite:///{Path(tmp) / 'pool.sqlite'}")
        try:
            return [snapshot(SimPool.create(engine, spec, clock))]
        finally:
            engine.dispose()


def _from_store(url: str, name: str | None, clock: Clock) -> list[PoolSnapshot]:
    engine = create_db_engine(url)
    try:
        names = [name] if name else SimPool.pool_names(engine)
        if not names:
            raise NotFound(f"no simulated pool in {url}; load one (pool file) first")
        return [snapshot(SimPool.open(engine, n, clock)) for n in names]
    finally:
        engine.dispose()


def render_table(snap: PoolSnapshot) -> str:
    """Human-readable: a nodes table, a GPU table and a deploy table."""
    used = sum(1 for g in snap.gpus if g.state == "held")
    head = f"pool {snap.name}: {snap.capacity} GPUs on {len(snap.nodes)} node(s), {used} held — at {snap.at.isoformat()}"
    nodes = render.table(["NODE", "FLAVOR", "REGION", "GPUS", "FREE"], [[n.name, n.flavor, n.region, str(n.gpus), str(n.free)] for n in snap.nodes])
    gpus = render.table(
        ["GPU UUID", "NODE", "#", "STATE", "HOLDER"],
        [[g.uuid, g.node, str(g.index), g.state, g.holder or "-"] for g in snap.gpus],
    )
    deploys = render.table(
        ["DEPLOY", "KIND", "STATE", "GPUS/REPLICA", "NODES/REPLICA", "REPLICAS", "READY", "ALIASES", "PROJECT"],
        [
            [d.id, d.kind.value, d.state.value, str(d.gpus_per_replica), str(d.nodes_per_replica), str(d.desired_replicas), str(d.ready_replicas), ",".join(d.aliases) or "-", d.project or "-"]
            for d in snap.deploys
        ],
    )
    parts = [head, "", nodes, "", gpus, "", deploys]
    if snap.foreign:
        parts += ["", render.table(["FOREIGN", "KIND", "GPUS"], [[f.id, f.kind, str(f.gpus)] for f in snap.foreign])]
    return "\n".join(parts)


def _act(settings: Any, deploy_id: str, what: str, call: Callable[[Any, str, str], Any]) -> None:
    """One manual operation on ``deploy_id``: read its ETag, call the core, print the outcome."""
    if settings.backend != "sim":
        fail(SettingsInvalid([FieldError(
            "--backend", "pool_actions_sim_only",
            f"`pool {what}` acts on the simulated pool, not {settings.backend}: use kubectl "
            "(kubectl scale deploy/NAME --replicas=N)",
        )]))
    rt = wiring.runtime(settings)
    key = f"operator/{what}/{uuid.uuid4().hex[:12]}"
    try:
        etag = rt.core.get_deploy(deploy_id).etag
        op = call(rt.core, etag, key)
        owner = rt.store.owner_of(deploy_id)
    except CoreError as exc:
        click.echo(f"error: {deploy_id}: {exc.reason} — {exc} — fix: {_fix(exc)}", err=True)
        sys.exit(1)
    finally:
        rt.close()
    click.echo(f"{what} {deploy_id}: operation {op.id} {op.state.value} (idempotency key {key})")
    if owner:
        click.echo(f"note: {deploy_id} belongs to schedule '{owner}': once it had converged, the "
                   "engine records drift_detected and respects this until the intent changes")


def _fix(exc: CoreError) -> str:
    reason = exc.reason or ""
    if "overcommit" in reason or "budget" in reason or "reservation" in reason:
        return "stop another member of the reservation or lower memory_mib, then retry"
    if "alias" in reason:
        return "pass --allow-downtime to stop an aliased deploy on purpose"
    if "quota" in reason:
        return "raise the project's quota or free GPUs in it, then retry"
    return "check the deploy (gps-dagster pool show) and retry"


@pool_group.command("stop")
@click.argument("deploy_id")
@click.option("--allow-downtime", is_flag=True, help="Consent to stop a deploy that has an alias.")
@wiring.core_options
def stop_cmd(deploy_id: str, allow_downtime: bool, settings: Any) -> None:
    """Stop DEPLOY by hand (an operator's action)."""
    _act(settings, deploy_id, "stop", lambda core, etag, key: core.stop(
        deploy_id, etag=etag, allow_aliased_downtime=allow_downtime, idempotency_key=key))


@pool_group.command("start")
@click.argument("deploy_id")
@wiring.core_options
def start_cmd(deploy_id: str, settings: Any) -> None:
    """Start DEPLOY by hand (through the core's admission: quota, reservation budget)."""
    _act(settings, deploy_id, "start", lambda core, etag, key: core.start(
        deploy_id, etag=etag, idempotency_key=key))


@pool_group.command("scale")
@click.argument("deploy_id")
@click.argument("replicas", type=click.IntRange(min=1, max=10_000))
@wiring.core_options
def scale_cmd(deploy_id: str, replicas: int, settings: Any) -> None:
    """Set DEPLOY's replicas by hand (``pool stop`` for zero)."""
    _act(settings, deploy_id, "scale", lambda core, etag, key: core.set_replica_intent(
        deploy_id, replicas, etag=etag, idempotency_key=key))
