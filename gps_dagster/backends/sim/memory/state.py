"""The in-memory simulated pool's records: the ``sim_*`` tables of ``schema``, one pool, as objects.

Each record has the attributes of its table's columns, so the shared pure pieces
(``backends.sim.pure``) read a ``DeployRec`` as they read a SQL row. What a pass reads
is indexed: GPUs by node (in index order) and by holder, groups by deploy, operations
by key, id and deploy, shares by occupant. ``PoolState.copy`` is the rollback point of a
call that must leave nothing behind (a crash before commit): the append-only logs
(operations, usage) are rolled back by length.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gps_dagster.domain.pool import FaultSpec


@dataclass(slots=True)
class GpuRec:
    uuid: str
    node: str
    idx: int
    state: str = "free"
    """free, held, terminating or unpublished (``schema`` explains the life cycle)."""
    holder: str | None = None
    holder_type: str | None = None
    grp: int | None = None
    until: float | None = None


@dataclass(slots=True)
class GroupRec:
    deploy: str
    grp: int
    state: str = "pending"
    ready_at: float | None = None


@dataclass(slots=True)
class DeployRec:
    id: str
    ordinal: int
    kind: str
    project: str | None
    endpoint: str | None
    flavor: str | None
    hpa: bool
    node_selector: str
    aliases: str
    gpus_per_replica: int
    nodes_per_replica: int
    desired: int
    role_min: int
    role_max: int
    running: bool
    forced_state: str | None
    version: int
    generation: int
    applied_generation: int
    next_grp: int


@dataclass(frozen=True, slots=True)
class OperationRec:
    id: str
    seq: int
    key: str
    deploy: str
    kind: str
    replicas: int | None
    persist_only: bool
    state: str
    etag_after: str
    created_at: float


@dataclass(slots=True)
class FaultRec:
    id: int
    spec: FaultSpec
    remaining: int | None
    """One-shot hits left; None: a persistent fault."""


@dataclass(frozen=True, slots=True)
class ShareRec:
    reservation: str
    occupant: str
    kind: str
    """member | holder."""
    gpu_uuid: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class ForeignRec:
    id: str
    kind: str
    gpus: int
    flavor: str | None


@dataclass(frozen=True, slots=True)
class ProjectRec:
    gpu_quota: int | None
    billing: str


@dataclass
class PoolState:
    """One pool's rows, plus the ``sim_pool`` row's scalars."""

    clock_at: float
    next_event_at: float | None = None
    op_seq: int = 0
    revision: int = 0
    gpus: dict[str, GpuRec] = field(default_factory=dict)
    by_node: dict[str, list[GpuRec]] = field(default_factory=dict)
    """node -> its GPUs in index order (the same records as ``gpus``)."""
    deploys: dict[str, DeployRec] = field(default_factory=dict)
    """In pool-file order (``ordinal``)."""
    groups: dict[str, dict[int, GroupRec]] = field(default_factory=dict)
    """deploy -> grp -> group (every deploy has an entry)."""
    projects: dict[str, ProjectRec] = field(default_factory=dict)
    foreign: dict[str, ForeignRec] = field(default_factory=dict)
    faults: list[FaultRec] = field(default_factory=list)
    fault_ids: int = 0
    shares: dict[str, ShareRec] = field(default_factory=dict)
    """occupant -> its fractional pod."""
    operations: list[OperationRec] = field(default_factory=list)
    """In ``seq`` order."""
    ops_by_key: dict[str, OperationRec] = field(default_factory=dict)
    ops_by_id: dict[str, OperationRec] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)
    """deploy -> the seq of its latest operation (what supersedes an earlier one)."""
    usage: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    free_on: dict[str, set[str]] = field(default_factory=dict)
    """node -> its free GPUs (nodes with none left out)."""
    by_holder: dict[str, set[str]] = field(default_factory=dict)
    """holder -> the GPUs it holds or that are terminating for it."""
    timed: set[str] = field(default_factory=set)
    """GPUs whose state ends at ``until`` (terminating, unpublished)."""
    timed_groups: dict[tuple[str, int], GroupRec] = field(default_factory=dict)
    """Groups that become ready at ``ready_at``."""
    in_state: dict[str, int] = field(default_factory=dict)
    """GPUs per state."""
    held_count: dict[str, int] = field(default_factory=dict)
    """holder -> GPUs it holds (state ``held``; holders with none left out)."""
    pending: set[tuple[str, int]] = field(default_factory=set)
    """(deploy, grp) of the groups waiting for placement."""

    # -- GPUs and groups change only here, so the indexes always agree with the records --------

    def add_gpu(self, gpu: GpuRec) -> None:
        self.gpus[gpu.uuid] = gpu
        self.by_node.setdefault(gpu.node, []).append(gpu)
        self._index(gpu)

    def set_gpu(
        self,
        g: GpuRec,
        state: str,
        *,
        holder: str | None,
        holder_type: str | None,
        grp: int | None,
        until: float | None,
    ) -> None:
        self._unindex(g)
        g.state, g.holder, g.holder_type, g.grp, g.until = state, holder, holder_type, grp, until
        self._index(g)

    def _index(self, g: GpuRec) -> None:
        if g.state == "free":
            self.free_on.setdefault(g.node, set()).add(g.uuid)
        if g.holder is not None:
            self.by_holder.setdefault(g.holder, set()).add(g.uuid)
        if g.until is not None:
            self.timed.add(g.uuid)
        self.in_state[g.state] = self.in_state.get(g.state, 0) + 1
        if g.state == "held" and g.holder is not None:
            self.held_count[g.holder] = self.held_count.get(g.holder, 0) + 1

    def _unindex(self, g: GpuRec) -> None:
        if g.state == "free":
            free = self.free_on[g.node]
            free.discard(g.uuid)
            if not free:
                del self.free_on[g.node]
        if g.holder is not None:
            held = self.by_holder[g.holder]
            held.discard(g.uuid)
            if not held:
                del self.by_holder[g.holder]
        self.timed.discard(g.uuid)
        self.in_state[g.state] -= 1
        if g.state == "held" and g.holder is not None:
            left = self.held_count[g.holder] - 1
            if left:
                self.held_count[g.holder] = left
            else:
                del self.held_count[g.holder]

    def of_holder(self, holder: str) -> list[GpuRec]:
        """The holder's GPUs (held or terminating), in no particular order."""
        return [self.gpus[u] for u in self.by_holder.get(holder, ())]

    def set_group(self, gr: GroupRec, state: str, ready_at: float | None) -> None:
        gr.state, gr.ready_at = state, ready_at
        if state == "pending":
            self.pending.add((gr.deploy, gr.grp))
        else:
            self.pending.discard((gr.deploy, gr.grp))
        if ready_at is None:
            self.timed_groups.pop((gr.deploy, gr.grp), None)
        else:
            self.timed_groups[(gr.deploy, gr.grp)] = gr

    def add_group(self, gr: GroupRec) -> None:
        self.groups[gr.deploy][gr.grp] = gr
        if gr.state == "pending":
            self.pending.add((gr.deploy, gr.grp))
        if gr.ready_at is not None:
            self.timed_groups[(gr.deploy, gr.grp)] = gr

    def drop_group(self, deploy: str, grp: int) -> None:
        del self.groups[deploy][grp]
        self.timed_groups.pop((deploy, grp), None)
        self.pending.discard((deploy, grp))

    def record(self, op: OperationRec) -> None:
        self.operations.append(op)
        self.ops_by_key[op.key] = op
        self.ops_by_id[op.id] = op
        self.last_seq[op.deploy] = op.seq

    def copy(self) -> PoolState:
        """A rollback point: every record copied, the indexes rebuilt on the copies."""
        out = copy.copy(self)
        out.gpus, out.by_node = {}, {}
        out.free_on, out.by_holder, out.timed, out.in_state, out.held_count = {}, {}, set(), {}, {}
        for g in self.gpus.values():
            out.add_gpu(copy.copy(g))
        out.deploys = {i: copy.copy(d) for i, d in self.deploys.items()}
        out.groups = {d: {k: copy.copy(g) for k, g in gs.items()} for d, gs in self.groups.items()}
        every = [g for gs in out.groups.values() for g in gs.values()]
        out.timed_groups = {(g.deploy, g.grp): g for g in every if g.ready_at is not None}
        out.pending = {(g.deploy, g.grp) for g in every if g.state == "pending"}
        out.projects, out.foreign, out.shares = (
            dict(self.projects),
            dict(self.foreign),
            dict(self.shares),
        )
        out.faults = [copy.copy(f) for f in self.faults]
        out.ops_by_key, out.ops_by_id, out.last_seq = (
            dict(self.ops_by_key),
            dict(self.ops_by_id),
            dict(self.last_seq),
        )
        out.operations, out.usage = list(self.operations), list(self.usage)
        return out
