"""The SQL-free pieces of the simulated pool, shared by ``SimPool`` and ``MemoryPool``.

Placement choices, derived deploy state, operation states, capacity fits and
admission answers depend only on the facts they are given (free GPUs per node,
group counts, a deploy's fields), never on where those facts are stored: the
SQL pool and the in-memory pool compute them here, so the two cannot drift.
A deploy "row" is anything with the ``sim_deploy`` columns as attributes (a
SQLAlchemy row, or ``memory.state.DeployRec``).
"""

# Decisions embodied here (docs/decisions.md):
# * “The in-memory simulated pool shares the simulator's pure pieces”

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from gps_dagster.domain.fitting import groups_fitting
from gps_dagster.domain.gps.admission import Admitted, Decision, Overcommitted
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.gps.reservations import format_mib
from gps_dagster.domain.kinds import DeployKind, scale_refusal
from gps_dagster.ports import (
    AdmissionPreview,
    AdmissionRefused,
    CapacityPreview,
    DeployState,
    DeployView,
    Fits,
    Insufficient,
    Operation,
    OperationKind,
    OperationState,
    ReservationBinding,
    Unsupported,
)

DeployRow = Any
"""A deploy's fields as attributes (``sim_deploy``'s columns)."""
OperationRow = Any
"""An operation's fields as attributes (``sim_operation``'s columns)."""
Binding = ExclusiveBinding | TimeSlicedBinding
HOLDER_MIB = 1
"""VRAM the holder's minimal fractional pod asks for."""
WITNESS_SOURCE = "sim_placement"


@dataclass(frozen=True)
class Outcome:
    changed: bool
    persist_only: bool = False


@dataclass(frozen=True)
class Blocks:
    """Persistent faults in force for this transaction."""

    unschedulable: set[str]
    never_ready: set[str]
    fail_start: set[str]
    fail_stop: set[str]


class Topology(Protocol):
    """The nodes of a pool, fixed after load."""

    @property
    def flavors(self) -> Mapping[str, str]:
        """node -> flavor."""
        ...

    @property
    def ordinals(self) -> Mapping[str, int]:
        """node -> its position in the pool file."""
        ...


def to_dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def etag_of(deploy_id: str, version: int) -> str:
    """Opaque, and never equal for two deploys (a wrong deploy's ETag is stale too)."""
    return f'W/"{deploy_id}.{version}"'


@functools.lru_cache(maxsize=4096)
def names(document: str) -> tuple[str, ...]:
    """A JSON list of names (aliases, a node selector), parsed once per distinct text."""
    return tuple(json.loads(document))


def holder_id(reservation_id: str) -> str:
    return f"holder:{reservation_id}"


# -- placement ------------------------------------------------------------------------------


def eligible(
    topo: Topology, free: Mapping[str, int], flavor: str | None, selector: Iterable[str] = ()
) -> dict[str, int]:
    """Free counts of the nodes a deploy may use (flavor, node selector)."""
    allowed = set(selector)
    return {
        n: f
        for n, f in free.items()
        if (flavor is None or topo.flavors.get(n) == flavor) and (not allowed or n in allowed)
    }


def choose_nodes(
    topo: Topology,
    free: Mapping[str, int],
    flavor: str | None,
    per_node: int,
    count: int,
    selector: Iterable[str] = (),
) -> list[str] | None:
    """Best-fit choice of ``count`` distinct nodes with ``per_node`` free GPUs each."""
    fitting = [n for n, f in eligible(topo, free, flavor, selector).items() if f >= per_node]
    if flavor is None:  # a group never mixes flavors: pick the flavor that fits best
        by_flavor: dict[str, list[str]] = {}
        for n in fitting:
            by_flavor.setdefault(topo.flavors[n], []).append(n)
        fitting = next((ns for _, ns in sorted(by_flavor.items()) if len(ns) >= count), [])
    if len(fitting) < count:
        return None
    fitting.sort(key=lambda n: (free[n], topo.ordinals[n]))
    return fitting[:count]


def unbound_preview(
    topo: Topology, row: DeployRow, free: Mapping[str, int], delta: int
) -> CapacityPreview:
    """Fit ``delta`` whole replica groups of an unbound deploy on ``free``, node by node, per
    flavor."""
    per_node = row.gpus_per_replica // row.nodes_per_replica
    npr = row.nodes_per_replica
    matching = eligible(topo, free, row.flavor, names(row.node_selector))
    if row.flavor is not None and row.flavor not in set(topo.flavors.values()):
        return Insufficient("no_matching_flavor", {}, delta, 0)
    by_flavor: dict[str, list[int]] = {}
    for node, f in matching.items():
        if f >= per_node:
            by_flavor.setdefault(topo.flavors[node], []).append(f // per_node)
    fitting = sum(groups_fitting(slots, npr, delta) for slots in by_flavor.values())
    if fitting >= delta:
        return Fits(groups=delta)
    return Insufficient(
        "insufficient_capacity", dict(sorted(matching.items())), delta, min(fitting, delta)
    )


def take(topo: Topology, row: DeployRow, free: dict[str, int], delta: int) -> None:
    """Count ``delta`` groups of ``row`` as taken from ``free`` (a batch's fitting preview)."""
    per_node = row.gpus_per_replica // row.nodes_per_replica
    selector = names(row.node_selector)
    for _ in range(delta):
        nodes = choose_nodes(topo, free, row.flavor, per_node, row.nodes_per_replica, selector)
        if not nodes:
            return
        for node in nodes:
            free[node] -= per_node
            if free[node] <= 0:
                del free[node]


# -- read models ------------------------------------------------------------------------------


def derive_state(row: DeployRow, counts: Mapping[str, int], terminating: int) -> DeployState:
    if row.forced_state:
        return DeployState(row.forced_state)
    if not row.running:
        return DeployState.STOPPED
    total = sum(counts.values())
    ready = counts.get("ready", 0)
    if ready == row.desired == total and row.applied_generation == row.generation:
        return DeployState.READY
    return DeployState.UPDATING if ready else DeployState.STARTING


def binding_view(binding: Binding | None) -> ReservationBinding | None:
    if binding is None:
        return None
    if isinstance(binding, TimeSlicedBinding):
        return ReservationBinding((binding.reservation,), "time_sliced", binding.memory_mib)
    return ReservationBinding(tuple(binding.reservations), "exclusive")


def view_of(
    row: DeployRow, counts: Mapping[str, int], term: int, binding: Binding | None
) -> DeployView:
    """A deploy's view from its row, its groups by state and its terminating pods."""
    pending = counts.get("pending", 0)
    return DeployView(
        id=row.id,
        kind=DeployKind(row.kind),
        state=derive_state(row, counts, term),
        etag=etag_of(row.id, row.version),
        aliases=names(row.aliases),
        project=row.project,
        cmp_managed=row.project is not None,
        endpoint=row.endpoint,
        gpus_per_replica=row.gpus_per_replica,
        nodes_per_replica=row.nodes_per_replica,
        desired_replicas=row.desired,
        ready_replicas=counts.get("ready", 0),
        generation=row.generation,
        applied_generation=row.applied_generation,
        terminating_pods=term,
        unschedulable=bool(row.running and pending),
        hpa=bool(row.hpa),
        role_min=row.role_min,
        role_max=row.role_max,
        reservation=binding_view(binding),
    )


def settled_state(op: OperationRow, view: DeployView, *, superseded: bool) -> OperationState:
    """An operation's live state: its recorded one unless ACCEPTED, then what its deploy shows."""
    if op.state != OperationState.ACCEPTED:
        return OperationState(op.state)
    if superseded:
        return OperationState.SUPERSEDED
    if op.kind == OperationKind.STOP:
        done = view.converged_stopped
    else:
        done = (
            view.state is DeployState.READY
            and view.ready_replicas == view.desired_replicas
            and view.terminating_pods == 0
        )
    return OperationState.DONE if done else OperationState.ACCEPTED


def to_operation(op: OperationRow, state: OperationState) -> Operation:
    return Operation(
        id=op.id,
        deploy_id=op.deploy,
        kind=OperationKind(op.kind),
        idempotency_key=op.key,
        state=state,
        etag_after=op.etag_after,
        created_at=to_dt(op.created_at),
        replicas=op.replicas,
        persist_only=bool(op.persist_only),
    )


# -- reservation admission ---------------------------------------------------------------------


def admission_message(deploy_id: str, decision: Any) -> str:
    """The refusal with its figures (``Overcommitted.fix`` names every MiB count)."""
    return f"{deploy_id} on reservation '{decision.reservation_id}': {decision.fix}"


def admission_view(deploy_id: str, decision: Decision | None) -> AdmissionPreview:
    """The read-only answer of an admission decision (None: no VRAM budget applies)."""
    if decision is None:
        return AdmissionPreview(deploy_id, True)
    if isinstance(decision, Admitted):
        return AdmissionPreview(
            deploy_id,
            True,
            decision.reservation_id,
            None,
            f"fits: {format_mib(decision.total_mib)} of {format_mib(decision.budget_mib)} MiB",
            decision.budget_mib,
        )
    if isinstance(decision, Overcommitted):
        return AdmissionPreview(
            deploy_id,
            False,
            decision.reservation_id,
            decision.reason,
            admission_message(deploy_id, decision),
            decision.budget_mib,
            decision.running_mib,
            decision.in_flight_mib,
            decision.proposed_mib,
        )
    return AdmissionPreview(
        deploy_id,
        False,
        decision.reservation_id,
        decision.reason,
        admission_message(deploy_id, decision),
    )


def reservation_of(binding: Binding | None) -> str | None:
    """The reservation a bound deploy's GPUs count against (quota, R-GPS-8)."""
    if isinstance(binding, TimeSlicedBinding):
        return binding.reservation
    if isinstance(binding, ExclusiveBinding):
        return binding.reservations[0]
    return None


def refuse_forced(row: DeployRow) -> None:
    """A DELETING or FAILED deploy is refused a start or a scale."""
    if row.forced_state == "DELETING":
        raise AdmissionRefused("deploy_deleting", f"{row.id} is being deleted")
    if row.forced_state == "FAILED":
        raise AdmissionRefused("deploy_failed", f"{row.id} is FAILED")


def refuse_scale(row: DeployRow, replicas: int, binding: Binding | None) -> None:
    """A replica intent the deploy cannot take: zero replicas, a kind a schedule cannot scale, a
    DELETING or FAILED deploy, more than one replica of a time-sliced member."""
    if replicas < 1:
        raise AdmissionRefused("replicas_must_be_positive", "use stop for zero replicas")
    refusal = scale_refusal(
        DeployKind(row.kind), hpa=bool(row.hpa), cmp_endpoint=row.endpoint is not None
    )
    if refusal:
        raise Unsupported(
            refusal, f"{row.id} ({row.kind}) cannot be scaled by a schedule: {refusal}"
        )
    refuse_forced(row)
    if isinstance(binding, TimeSlicedBinding) and replicas != 1:
        raise Unsupported(
            "unsupported_scale_for_mode",
            f"{row.id} is a time-sliced member: one replica on its reservation's GPU",
        )


def operation_fields(
    seq: int,
    key: str,
    deploy_id: str,
    kind: OperationKind,
    replicas: int | None,
    outcome: Outcome,
    version: int,
    now: float,
) -> dict[str, Any]:
    """The fields of operation number ``seq`` as it is recorded (``sim_operation``'s columns)."""
    return dict(
        id=f"op-{seq:06d}",
        seq=seq,
        key=key,
        deploy=deploy_id,
        kind=kind.value,
        replicas=replicas,
        persist_only=outcome.persist_only,
        state=OperationState.DONE.value if outcome.persist_only else OperationState.ACCEPTED.value,
        etag_after=etag_of(deploy_id, version),
        created_at=now,
    )
