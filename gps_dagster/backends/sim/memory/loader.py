"""Loading a pool file (``PoolSpec``) into an in-memory pool (``backends.sim.loader``'s twin).

Deploys declared ``running`` and static foreign workloads are placed at load and
READY at once; a pool whose running workloads do not fit is refused with the same
field paths as the SQL pool.
"""

from __future__ import annotations

import json

from gps_dagster.backends.sim import seam
from gps_dagster.backends.sim.ledger import Ledger
from gps_dagster.backends.sim.loader import check_bindings
from gps_dagster.backends.sim.memory import reserved
from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.dynamics import (
    STORAGE,
    place_pending,
    record_usage,
    save_next_event,
)
from gps_dagster.backends.sim.memory.mutations import insert_fault
from gps_dagster.backends.sim.memory.state import (
    DeployRec,
    ForeignRec,
    GpuRec,
    GroupRec,
    PoolState,
    ProjectRec,
)
from gps_dagster.backends.sim.pure import Binding
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.pool import PoolSpec

__all__ = ["bindings_of", "load"]


def bindings_of(spec: PoolSpec) -> dict[str, Binding]:
    return {d.id: b for d in spec.deploys if (b := d.binding()) is not None}


def load(spec: PoolSpec, now: float, ledger: Ledger) -> MemCtx:
    """The pool's state at ``now``, as the SQL pool's ``loader.load`` writes it; the load's
    context."""
    check_bindings(spec, ledger)
    state = PoolState(clock_at=now)
    for node in spec.nodes:
        for idx, uuid in enumerate(spec.uuids(node)):
            state.add_gpu(GpuRec(uuid, node.name, idx))
    for i, d in enumerate(spec.deploys):
        running = d.state == "running"
        state.deploys[d.id] = DeployRec(
            id=d.id,
            ordinal=i,
            kind=d.kind.value,
            project=d.project,
            endpoint=d.endpoint,
            flavor=d.flavor,
            hpa=d.hpa,
            node_selector=json.dumps(list(d.node_selector)),
            aliases=json.dumps(list(d.aliases)),
            gpus_per_replica=d.gpus_per_replica,
            nodes_per_replica=d.nodes_per_replica,
            desired=d.replicas,
            role_min=d.replicas,
            role_max=d.replicas,
            running=running,
            forced_state=None,
            version=1,
            generation=1,
            applied_generation=1,
            next_grp=d.replicas if running else 0,
        )
        state.groups[d.id] = {}
        for g in range(d.replicas if running else 0):
            state.add_group(GroupRec(d.id, g))
    for name, proj in spec.projects.items():
        state.projects[name] = ProjectRec(proj.gpu_quota, proj.billing)
    for fault in spec.sim.faults:
        insert_fault(state, fault)
    ctx = MemCtx(
        state=state,
        timings=spec.sim.timings,
        flavors={n.name: n.flavor for n in spec.nodes},
        ordinals={n.name: i for i, n in enumerate(spec.nodes)},
        now=now,
        record_usage=spec.sim.record_usage,
        read_ledger=lambda: ledger,
        bindings=bindings_of(spec),
    )
    _foreign(ctx, spec)
    _place_running(ctx, spec)
    if ledger.rsvs:
        reserved.sync_holders(ctx)
    save_next_event(ctx)
    record_usage(ctx)
    return ctx


def _foreign(ctx: MemCtx, spec: PoolSpec) -> None:
    problems = []
    for i, fw in enumerate(spec.sim.foreign):
        ctx.state.foreign[fw.id] = ForeignRec(fw.id, fw.kind, fw.gpus, fw.flavor)
        if fw.kind != "static":
            continue
        problem = seam.place_static_foreign(STORAGE, ctx, i, fw)
        if problem is not None:
            problems.append(problem)
    if problems:
        raise SpecInvalid(problems, source=spec.name)


def _place_running(ctx: MemCtx, spec: PoolSpec) -> None:
    place_pending(ctx, blocked=set(), never_ready=set())
    stuck: set[str] = set()
    for dep, groups in ctx.state.groups.items():
        for g in groups.values():
            if g.state == "starting":
                ctx.state.set_group(g, "ready", None)
            elif g.state == "pending":
                stuck.add(dep)
    if stuck:
        raise SpecInvalid(
            [
                FieldError(
                    f"deploys[{i}].state",
                    "initial_overcommit",
                    f"running '{d.id}' does not fit the pool; stop it or add GPUs",
                )
                for i, d in enumerate(spec.deploys)
                if d.id in stuck
            ],
            source=spec.name,
        )
