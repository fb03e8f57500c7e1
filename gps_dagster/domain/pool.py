"""The pool file: nodes, deploys, projects of one GPU pool (YAML or JSON).

The same document feeds ``gps-dagster timeline --pool`` (capacity and GPUs per
deploy) and the embedded simulated pool (``gps_dagster.backends.sim``), which
also reads its timings, foreign workloads and faults.

GPS (R-GPS) adds two optional parts: ``reservations`` (reservation specs the
simulator records in the store's reservation ledger when it loads the pool —
the ledger stays the one source of truth) and, per deploy, ``reservation``:
``{mode: exclusive, reservations: [R1, R2]}`` (whole GPUs, ``gpus_per_replica``
of the deploy) or ``{mode: time_sliced, reservation: R, memory_mib: N}``.

Like schedules, pool documents are strict (``gpus: "8"`` or ``hpa: yes`` is an
error naming the expected type) and bounded: the simulator builds one row per
GPU and per replica, so ``gpus: 1000000000`` must be refused here, not run.
"""

# Decisions embodied here (docs/decisions.md):
# * “Documents are strict and bounded”

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from gps_dagster.domain.documents import build, parse_text
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding, binding_errors
from gps_dagster.domain.gps.reservations import Reservation, ReservationSpec
from gps_dagster.domain.kinds import DeployKind
from gps_dagster.domain.models import Frozen

_UUID_NAMESPACE = uuid.UUID("6f1b7e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b")

MAX_NODE_GPUS = 1024
"""Most GPUs on one node (real nodes hold 8 or 16)."""
MAX_REPLICAS = 10_000
MAX_GPU_MEMORY_MIB = 10_000_000
MAX_SECONDS = 7 * 86_400.0
"""Longest simulated delay (a week of virtual time)."""


def gpu_uuid(pool: str, node: str, index: int) -> str:
    """A stable NVIDIA-style GPU UUID (``GPU-<uuid>``) for a GPU of a declared node."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{pool}/{node}/{index}')}"


class NodeSpec(Frozen):
    name: str = Field(min_length=1)
    gpus: int = Field(ge=1, le=MAX_NODE_GPUS, strict=True, description="GPUs on the node.")
    flavor: str = Field(
        default="H100-80GB", description="GPU flavor; a replica fits only its flavor."
    )
    region: str = "default"
    gpu_memory_mib: int = Field(
        default=81559,
        ge=1,
        le=MAX_GPU_MEMORY_MIB,
        strict=True,
        description="Memory of one GPU in MiB.",
    )
    gpu_uuids: tuple[str, ...] | None = Field(
        default=None, description="Explicit GPU UUIDs; derived from pool/node/index when absent."
    )


class ExclusiveRef(Frozen):
    """A deploy's exclusive binding in a pool file: whole GPUs from these reservations only."""

    mode: Literal["exclusive"] = "exclusive"
    reservations: tuple[str, ...] = Field(
        min_length=1, description="Reservation ids a replica may land on."
    )


DeployReservation = Annotated[ExclusiveRef | TimeSlicedBinding, Field(discriminator="mode")]


class DeploySpec(Frozen):
    id: str = Field(min_length=1)
    kind: DeployKind = DeployKind.DGD
    project: str | None = Field(
        default=None, description="CMP project; None = admin (not CMP-managed)."
    )
    gpus_per_replica: int = Field(
        ge=1,
        le=MAX_NODE_GPUS * 64,
        strict=True,
        description="GPUs of one replica group (all its nodes).",
    )
    nodes_per_replica: int = Field(default=1, ge=1, le=64, strict=True)
    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        strict=True,
        description="Replicas the deploy runs with when started.",
    )
    state: Literal["running", "stopped"] = "stopped"
    aliases: tuple[str, ...] = ()
    flavor: str | None = Field(default=None, description="Required GPU flavor; None = any.")
    endpoint: str | None = Field(
        default=None, description="CMP endpoint this deploy is a member of."
    )
    hpa: bool = Field(default=False, strict=True)
    node_selector: tuple[str, ...] = Field(
        default=(),
        description="Nodes the deploy's pods may run on; empty = any node of its flavor.",
    )
    reservation: DeployReservation | None = Field(
        default=None,
        description="GPU reservation binding (R-GPS-2); None = unbound, best-effort capacity.",
    )

    @property
    def gpus_per_node(self) -> int:
        return self.gpus_per_replica // self.nodes_per_replica

    def binding(self) -> ExclusiveBinding | TimeSlicedBinding | None:
        """The full binding: an exclusive one takes ``gpus_per_replica`` from the deploy."""
        ref = self.reservation
        if isinstance(ref, ExclusiveRef):
            return ExclusiveBinding(
                gpus_per_replica=self.gpus_per_replica, reservations=ref.reservations
            )
        return ref


class ProjectSpec(Frozen):
    gpu_quota: int | None = Field(
        default=None,
        ge=0,
        le=10**9,
        strict=True,
        description="GPUs the project may hold; None = unlimited.",
    )
    billing: Literal["ok", "unpaid"] = "ok"


class Timings(Frozen):
    """Dynamics of the simulated pool, in seconds of (virtual) time."""

    stop_grace_s: float = Field(
        default=30,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Pods terminate this long before their GPUs are released.",
    )
    publish_lag_s: float = Field(
        default=60,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Released GPUs become visible as free after this lag.",
    )
    start_delay_s: float = Field(
        default=120,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="A placed replica group is READY after this delay.",
    )


class ForeignSpec(Frozen):
    """A workload no schedule owns and that is not a deploy (a static job, an intruder)."""

    id: str = Field(min_length=1)
    kind: Literal["static", "intruder"] = "static"
    gpus: int = Field(
        ge=1,
        le=MAX_NODE_GPUS * 1024,
        strict=True,
        description="static: GPUs held from load; intruder: most GPUs it will grab.",
    )
    node: str | None = Field(
        default=None, description="static: node to hold GPUs on; None = first fit."
    )
    flavor: str | None = Field(default=None, description="intruder: only grab GPUs of this flavor.")


FaultEffect = Literal[
    "fail_next",
    "lose_response",
    "crash",
    "unschedulable",
    "never_ready",
    "alias_guard_unwired",
    "alias_guard_error",
    "fail_start",
    "fail_stop",
    "failed",
    "deleting",
    "misplace",
]
FaultOp = Literal[
    "stop",
    "start",
    "set_replica_intent",
    "get_deploy",
    "get_deploys",
    "preview_capacity",
    "alias_guard",
    "check_quota",
    "check_billing",
    "get_operation",
    "list_members",
]
CrashPoint = Literal["before_mutation", "before_commit", "after_commit"]

ONE_SHOT_EFFECTS = frozenset({"fail_next", "lose_response", "crash"})
"""Effects consumed by the calls they hit (``times`` of them); the others persist until cleared."""


class FaultSpec(Frozen):
    """One declared fault; deterministic, persisted with the pool so every process sees it.

    ``fail_next``/``lose_response``/``crash`` hit the next ``times`` calls of ``op`` (on
    ``deploy`` if given). ``unschedulable``/``never_ready``/``fail_start``/``fail_stop``/
    ``failed``/``deleting`` concern ``deploy``. ``alias_guard_*`` concern ``deploy`` or all.
    ``misplace`` makes placement put a reservation-bound ``deploy`` outside its
    reservation (what the placement witness must catch, R-GPS-7).
    """

    effect: FaultEffect
    op: FaultOp | None = None
    deploy: str | None = None
    point: CrashPoint = Field(default="before_commit", description="crash only: where to raise.")
    error: Literal["transient", "permanent"] = Field(
        default="transient", description="fail_next only."
    )
    times: int = Field(
        default=1,
        ge=1,
        le=1_000_000,
        strict=True,
        description="One-shot effects: how many calls they hit.",
    )


class SimSettings(Frozen):
    """Simulator-only part of the pool file (``sim:``)."""

    timings: Timings = Field(default_factory=Timings)
    foreign: tuple[ForeignSpec, ...] = ()
    faults: tuple[FaultSpec, ...] = ()
    record_usage: bool = Field(
        default=True, strict=True, description="Keep a usage history (GPUs per holder over time)."
    )


class PoolSpec(Frozen):
    name: str = Field(min_length=1)
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)
    deploys: tuple[DeploySpec, ...] = ()
    projects: dict[str, ProjectSpec] = Field(default_factory=dict)
    reservations: tuple[ReservationSpec, ...] = Field(
        default=(),
        description="GPU reservations recorded in the reservation ledger when the pool loads.",
    )
    sim: SimSettings = Field(
        default_factory=SimSettings,
        description=(
            "Simulator settings (timings, foreign workloads, faults); read by backends.sim."
        ),
    )

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def deploy(self, deploy_id: str) -> DeploySpec | None:
        return next((d for d in self.deploys if d.id == deploy_id), None)

    def members(self, endpoint: str) -> tuple[DeploySpec, ...]:
        """The deploys of a CMP endpoint (a schedule target may name the endpoint)."""
        return tuple(d for d in self.deploys if d.endpoint == endpoint)

    def uuids(self, node: NodeSpec) -> tuple[str, ...]:
        if node.gpu_uuids is not None:
            return node.gpu_uuids
        return tuple(gpu_uuid(self.name, node.name, i) for i in range(node.gpus))


def _pool_checks(pool: PoolSpec) -> list[FieldError]:
    problems: list[FieldError] = []
    seen: dict[str, int] = {}
    for i, node in enumerate(pool.nodes):
        if node.name in seen:
            problems.append(
                FieldError(
                    f"nodes[{i}].name",
                    "duplicate_node",
                    f"node '{node.name}' is also nodes[{seen[node.name]}]; use unique names",
                )
            )
        seen.setdefault(node.name, i)
        if node.gpu_uuids is not None and len(node.gpu_uuids) != node.gpus:
            problems.append(
                FieldError(
                    f"nodes[{i}].gpu_uuids",
                    "uuid_count_mismatch",
                    f"list exactly {node.gpus} UUIDs or drop the field",
                )
            )
    ids: dict[str, int] = {}
    for i, dep in enumerate(pool.deploys):
        if dep.id in ids:
            problems.append(
                FieldError(
                    f"deploys[{i}].id",
                    "duplicate_deploy",
                    f"deploy '{dep.id}' is also deploys[{ids[dep.id]}]; use unique ids",
                )
            )
        ids.setdefault(dep.id, i)
        if dep.gpus_per_replica % dep.nodes_per_replica:
            problems.append(
                FieldError(
                    f"deploys[{i}].gpus_per_replica",
                    "uneven_group",
                    f"use a multiple of nodes_per_replica ({dep.nodes_per_replica})",
                )
            )
        for selected in dep.node_selector:
            if selected not in seen:
                problems.append(
                    FieldError(
                        f"deploys[{i}].node_selector",
                        "unknown_node",
                        f"declare node '{selected}' under nodes",
                    )
                )
        if dep.project is not None and dep.project not in pool.projects:
            problems.append(
                FieldError(
                    f"deploys[{i}].project",
                    "unknown_project",
                    f"declare project '{dep.project}' under projects",
                )
            )
    problems.extend(_sim_checks(pool, set(ids), set(seen)))
    problems.extend(_reservation_checks(pool))
    return problems


_LOADED = datetime(1970, 1, 1, tzinfo=UTC)


def _reservation_checks(pool: PoolSpec) -> list[FieldError]:
    """Reservations sit on declared GPUs of one node; bindings fit them (R-GPS-1, R-GPS-2)."""
    problems: list[FieldError] = []
    nodes = {n.name: n for n in pool.nodes}
    owner: dict[str, str] = {}
    ledger: dict[str, Reservation] = {}
    for i, rsv in enumerate(pool.reservations):
        path = f"reservations[{i}]"
        if rsv.id in ledger:
            problems.append(
                FieldError(
                    f"{path}.id",
                    "duplicate_reservation",
                    f"'{rsv.id}' is declared twice; use unique ids",
                )
            )
        ledger[rsv.id] = Reservation.from_spec(rsv, at=_LOADED)
        node = nodes.get(rsv.node)
        if node is None:
            problems.append(
                FieldError(f"{path}.node", "unknown_node", f"declare node '{rsv.node}' under nodes")
            )
            continue
        on_node = {u.lower() for u in pool.uuids(node)}
        for j, u in enumerate(rsv.gpu_uuids):
            if u.lower() not in on_node:
                problems.append(
                    FieldError(
                        f"{path}.gpu_uuids[{j}]",
                        "gpu_not_on_node",
                        f"{u} is not a GPU of node '{rsv.node}'; list that node's UUIDs",
                    )
                )
            elif owner.setdefault(u.lower(), rsv.id) != rsv.id:
                problems.append(
                    FieldError(
                        f"{path}.gpu_uuids[{j}]",
                        "gpu_already_reserved",
                        f"{u} already belongs to '{owner[u.lower()]}'",
                    )
                )
    for i, dep in enumerate(pool.deploys):
        problems.extend(_binding_checks(dep, f"deploys[{i}]", ledger))
    return problems


def _binding_checks(dep: DeploySpec, path: str, ledger: dict[str, Reservation]) -> list[FieldError]:
    binding = dep.binding()
    if binding is None:
        return []
    problems: list[FieldError] = []
    if isinstance(binding, TimeSlicedBinding) and (
        dep.gpus_per_replica,
        dep.nodes_per_replica,
        dep.replicas,
    ) != (1, 1, 1):
        problems.append(
            FieldError(
                f"{path}.reservation",
                "time_sliced_single_gpu",
                "a time-sliced member runs 1 replica on 1 GPU: set gpus_per_replica, "
                "nodes_per_replica and replicas to 1",
            )
        )
    if isinstance(binding, ExclusiveBinding) and dep.nodes_per_replica != 1:
        problems.append(
            FieldError(
                f"{path}.reservation",
                "reservation_single_node",
                "a reservation is single-node: bind only single-node replicas",
            )
        )
    known = {k: v for k, v in ledger.items() if k in _ids(binding)}
    errors = binding_errors(binding, known, path=f"{path}.reservation")
    problems.extend(
        e for e in errors if e.reason != "unknown_reservation"
    )  # may live in the ledger only
    return problems


def _ids(binding: ExclusiveBinding | TimeSlicedBinding) -> tuple[str, ...]:
    return binding.reservations if isinstance(binding, ExclusiveBinding) else (binding.reservation,)


def fault_problem(fault: FaultSpec, deploys: set[str]) -> str | None:
    """Why a fault cannot apply to this pool (a reason code), or ``None``."""
    if fault.deploy is not None and fault.deploy not in deploys:
        return "unknown_deploy"
    if fault.effect in ONE_SHOT_EFFECTS and fault.op is None:
        return "op_required"
    needs_deploy = {
        "unschedulable",
        "never_ready",
        "fail_start",
        "fail_stop",
        "failed",
        "deleting",
        "misplace",
    }
    if fault.effect in needs_deploy and fault.deploy is None:
        return "deploy_required"
    return None


def _sim_checks(pool: PoolSpec, deploys: set[str], nodes: set[str]) -> list[FieldError]:
    problems: list[FieldError] = []
    names: set[str] = set(deploys)
    for i, fw in enumerate(pool.sim.foreign):
        if fw.id in names:
            problems.append(
                FieldError(
                    f"sim.foreign[{i}].id",
                    "duplicate_holder",
                    f"'{fw.id}' is already a deploy or workload; use a unique id",
                )
            )
        names.add(fw.id)
        if fw.node is not None and fw.node not in nodes:
            problems.append(
                FieldError(
                    f"sim.foreign[{i}].node",
                    "unknown_node",
                    f"declare node '{fw.node}' under nodes",
                )
            )
    for i, fault in enumerate(pool.sim.faults):
        reason = fault_problem(fault, deploys)
        if reason:
            fixes = {
                "unknown_deploy": f"declare deploy '{fault.deploy}' under deploys",
                "op_required": "name the operation the fault hits (op: start, ...)",
                "deploy_required": "name the deploy the fault concerns (deploy: ...)",
            }
            problems.append(FieldError(f"sim.faults[{i}]", reason, fixes[reason]))
    return problems


def load_pool(data: Any, *, source: str = "<pool>") -> PoolSpec:
    """Validate a pool document (already parsed) into a ``PoolSpec``."""
    return build(PoolSpec, data, source=source, checks=_pool_checks)


def parse_pool(text: str, *, source: str = "<pool>") -> PoolSpec:
    """Parse and validate pool text (YAML or JSON)."""
    return load_pool(parse_text(text, source=source), source=source)
