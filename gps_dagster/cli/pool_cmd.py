"""``gps-dagster pool``: look at the GPU pool, and act on the simulated one by hand.

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

``pool show --backend kubernetes`` asks the cluster instead, through the core the
composition root builds: GPU nodes (capacity, allocatable, requested, free), the
pods holding GPUs on each (device UUIDs included) and GPU pods still pending.
"""

# Decisions embodied here (docs/decisions.md):
# * “Operator commands on the simulated pool”

from __future__ import annotations

import dataclasses
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
from gps_dagster.runtime import Settings, SettingsInvalid, build_clock, db_url
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository


@click.group("pool")
def pool_group() -> None:
    """The GPU pool: the simulated one, or a cluster's nodes and pods (--backend kubernetes)."""


@pool_group.command("show")
@click.option(
    "--pool",
    "pool_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A pool file (YAML/JSON).",
)
@click.option(
    "--db",
    "db",
    default=None,
    help="Database URL of the store (default: GPS_DB_URL or var/gps.sqlite).",
)
@wiring.BACKEND_OPTIONS[0]
@wiring.BACKEND_OPTIONS[1]
@wiring.BACKEND_OPTIONS[2]
@click.option("--name", default=None, help="Pool name in the store (default: every pool).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def show(
    pool_file: Path | None,
    db: str | None,
    backend: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    name: str | None,
    fmt: str,
) -> None:
    """Print nodes, GPUs (UUID -> holder) and deploys."""
    settings = wiring.settings(
        db_url=db, backend=backend, kubeconfig=kubeconfig, kube_context=kube_context
    )
    if settings.backend != "sim":
        _show_cluster(settings, fmt)
        return
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


@pool_group.command("describe")
@click.argument("deploy")
@wiring.BACKEND_OPTIONS[0]
@wiring.BACKEND_OPTIONS[1]
@wiring.BACKEND_OPTIONS[2]
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def describe(
    deploy: str, backend: str | None, kubeconfig: str | None, kube_context: str | None, fmt: str
) -> None:
    """One deploy on the cluster: conditions, Warning events and pods, in the API's own words."""
    settings = wiring.settings(backend=backend, kubeconfig=kubeconfig, kube_context=kube_context)
    rt = wiring.runtime(settings)
    try:
        read = getattr(rt.core, "describe", None)
        if read is None:
            fail(
                SettingsInvalid(
                    [
                        FieldError(
                            "--backend",
                            "pool_describe_unsupported",
                            f"the {settings.backend} core keeps no events; use `gps-dagster pool "
                            "show`",
                        )
                    ]
                )
            )
        story = read(deploy)
    except CoreError as exc:
        raise click.ClickException(f"{exc.reason}: {exc}") from None
    finally:
        rt.close()
    if fmt == "json":
        click.echo(json.dumps(story, indent=2))
        return
    click.echo(f"{story['deploy']}: {story['workload']}, {story['replicas']} replica(s)")
    cache = story.get("cache")
    if cache:
        age = cache.get("age_s")
        said = f", age {age:g} s" if isinstance(age, (int, float)) else ""
        direct = [k for k, v in (cache.get("kinds") or {}).items() if v.get("mode") == "direct"]
        why = f" (direct reads of {', '.join(direct)})" if direct else ""
        click.echo(f"  cache {cache['mode']}{said}{why}")
    for c in story["conditions"]:
        click.echo(
            f"  condition {c['type']}={c['status']} {c.get('reason') or ''} "
            f"{c.get('message') or ''}"
        )
    for w in story["warnings"]:
        click.echo(f"  warning {w['object']}: {w['reason']}: {w['message']} (x{w['count']})")
    for p in story["pods"]:
        where = p["node"] or "not placed"
        click.echo(
            f"  pod {p['name']} on {where}: {p['phase']}, {p['gpus']} GPU(s) "
            f"{','.join(p['devices']) or ''} {p['scheduling']}".rstrip()
        )


def _show_cluster(settings: Settings, fmt: str) -> None:
    rt = wiring.runtime(settings)
    try:
        inventory = getattr(rt.core, "inventory", None)  # read-back beyond the port, if offered
        if inventory is None:
            fail(
                SettingsInvalid(
                    [
                        FieldError(
                            "--backend",
                            "pool_show_unsupported",
                            f"the {settings.backend} core cannot list its nodes; use kubectl get "
                            "nodes,pods -A",
                        )
                    ]
                )
            )
        inv = inventory()
    except CoreError as exc:
        raise click.ClickException(f"{exc.reason}: {exc}") from None
    finally:
        rt.close()
    if fmt == "json":
        click.echo(json.dumps(dataclasses.asdict(inv), indent=2))
        return
    click.echo(render_inventory(inv))


def render_inventory(inv: Any) -> str:
    """Nodes, the GPU pods each holds, and GPU pods waiting for a node."""
    requested = sum(n.requested for n in inv.nodes)
    head = f"cluster: {inv.gpus} GPUs on {len(inv.nodes)} node(s), {requested} requested"
    nodes = render.table(
        ["NODE", "FLAVOR", "REGION", "GPUS", "ALLOCATABLE", "REQUESTED", "FREE", "READY"],
        [
            [
                n.name,
                n.flavor,
                n.region,
                str(n.capacity),
                str(n.allocatable),
                str(n.requested),
                str(n.free),
                "yes" if n.ready else "no",
            ]
            for n in inv.nodes
        ],
    )
    rows = [_pod_row(p, n.name) for n in inv.nodes for p in n.pods]
    rows += [_pod_row(p, "-") for p in inv.pending]
    header = ["NAMESPACE", "POD", "NODE", "DEPLOY", "GPUS", "PHASE", "STATE", "GPU UUIDS"]
    pods = render.table(header, rows)
    return "\n".join([head, "", nodes, "", pods])


def _pod_row(p: Any, node: str) -> list[str]:
    if node == "-":
        state = "pending"
    else:
        state = "terminating" if p.terminating else ("ready" if p.ready else "not ready")
    return [
        p.namespace,
        p.name,
        node,
        p.deploy or "-",
        str(p.gpus),
        p.phase or "Pending",
        state,
        ",".join(p.devices) or "-",
    ]


def _from_file(path: Path, clock: Clock) -> list[PoolSnapshot]:
    spec = parse_pool(path.read_text(), source=str(path))
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_db_engine(f"sqlite:///{Path(tmp) / 'pool.sqlite'}")
        try:
            ledger = ReservationRepository.migrated(engine) if spec.reservations else None
            return [snapshot(SimPool.create(engine, spec, clock, ledger=ledger))]
        finally:
            engine.dispose()


def _from_store(url: str, name: str | None, clock: Clock) -> list[PoolSnapshot]:
    engine = create_db_engine(url)
    try:
        names = [name] if name else SimPool.pool_names(engine)
        if not names:
            raise NotFound(f"no simulated pool in {url}; load one (pool file) first")
        ledger = ReservationRepository.if_present(engine)
        return [snapshot(SimPool.open(engine, n, clock, ledger=ledger)) for n in names]
    finally:
        engine.dispose()


def render_table(snap: PoolSnapshot) -> str:
    """Human-readable: a nodes table, a GPU table and a deploy table."""
    used = sum(1 for g in snap.gpus if g.state == "held")
    head = (
        f"pool {snap.name}: {snap.capacity} GPUs on {len(snap.nodes)} node(s), {used} held — at "
        f"{snap.at.isoformat()}"
    )
    nodes = render.table(
        ["NODE", "FLAVOR", "REGION", "GPUS", "FREE"],
        [[n.name, n.flavor, n.region, str(n.gpus), str(n.free)] for n in snap.nodes],
    )
    gpus = render.table(
        ["GPU UUID", "NODE", "#", "STATE", "HOLDER"],
        [[g.uuid, g.node, str(g.index), g.state, g.holder or "-"] for g in snap.gpus],
    )
    deploys = render.table(
        [
            "DEPLOY",
            "KIND",
            "STATE",
            "GPUS/REPLICA",
            "NODES/REPLICA",
            "REPLICAS",
            "READY",
            "ALIASES",
            "PROJECT",
        ],
        [
            [
                d.id,
                d.kind.value,
                d.state.value,
                str(d.gpus_per_replica),
                str(d.nodes_per_replica),
                str(d.desired_replicas),
                str(d.ready_replicas),
                ",".join(d.aliases) or "-",
                d.project or "-",
            ]
            for d in snap.deploys
        ],
    )
    parts = [head, "", nodes, "", gpus, "", deploys]
    if snap.foreign:
        parts += [
            "",
            render.table(
                ["FOREIGN", "KIND", "GPUS"], [[f.id, f.kind, str(f.gpus)] for f in snap.foreign]
            ),
        ]
    return "\n".join(parts)


def _act(settings: Any, deploy_id: str, what: str, call: Callable[[Any, str, str], Any]) -> None:
    """One manual operation on ``deploy_id``: read its ETag, call the core, print the outcome."""
    if settings.backend != "sim":
        fail(
            SettingsInvalid(
                [
                    FieldError(
                        "--backend",
                        "pool_actions_sim_only",
                        f"`pool {what}` acts on the simulated pool, not {settings.backend}: use "
                        "kubectl (kubectl scale deploy/NAME --replicas=N)",
                    )
                ]
            )
        )
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
        click.echo(
            f"note: {deploy_id} belongs to schedule '{owner}': once it had converged, the "
            "engine records drift_detected and respects this until the intent changes"
        )


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
    _act(
        settings,
        deploy_id,
        "stop",
        lambda core, etag, key: core.stop(
            deploy_id, etag=etag, allow_aliased_downtime=allow_downtime, idempotency_key=key
        ),
    )


@pool_group.command("start")
@click.argument("deploy_id")
@wiring.core_options
def start_cmd(deploy_id: str, settings: Any) -> None:
    """Start DEPLOY by hand (through the core's admission: quota, reservation budget)."""
    _act(
        settings,
        deploy_id,
        "start",
        lambda core, etag, key: core.start(deploy_id, etag=etag, idempotency_key=key),
    )


@pool_group.command("scale")
@click.argument("deploy_id")
@click.argument("replicas", type=click.IntRange(min=1, max=10_000))
@wiring.core_options
def scale_cmd(deploy_id: str, replicas: int, settings: Any) -> None:
    """Set DEPLOY's replicas by hand (``pool stop`` for zero)."""
    _act(
        settings,
        deploy_id,
        "scale",
        lambda core, etag, key: core.set_replica_intent(
            deploy_id, replicas, etag=etag, idempotency_key=key
        ),
    )
