"""CMP endpoints as schedule targets: a group of member deploys started and stopped together.

A target whose id names a CMP endpoint (not a deploy) is read as one
aggregate view of its members. Its steps touch the members one by one
(R-WARN ``partial_execution``): a start that fails after some members were
started compensates by stopping those; any failure — start, compensation or a
stop mid-group — ends in ``partial_execution{members}`` with a per-member
receipt. Members are read through the same ``Core`` port as any deploy.
"""

# Decisions embodied here (docs/decisions.md):
# * “CMP endpoints are targeted by endpoint id”
# * “The Core port is split by role”

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from gps_dagster.ports import (
    CapacityPreview,
    CoreError,
    DeployControl,
    DeployReads,
    DeployState,
    DeployView,
    Insufficient,
    NotFound,
    Operation,
    PreviewingReads,
    Transient,
)

RUNNING = frozenset({DeployState.READY, DeployState.STARTING, DeployState.UPDATING})


@dataclass
class PartialExecution(Exception):
    """Some members moved and some did not; ``receipt`` says which, per member."""

    receipt: dict[str, dict[str, Any]] = field(default_factory=dict)
    operations: list[Operation] = field(default_factory=list)

    @property
    def members(self) -> list[str]:
        return sorted(m for m, r in self.receipt.items() if r["result"] != "ok")


def read_target(core: DeployReads, target: str) -> tuple[DeployView, tuple[DeployView, ...] | None]:
    """The deploy, or the aggregate of an endpoint's members (raises NotFound if neither)."""
    try:
        return core.get_deploy(target), None
    except NotFound:
        members = core.list_members(target)
    return aggregate(target, members), members


def partially_running(members: tuple[DeployView, ...]) -> bool:
    running = [m.state in RUNNING for m in members]
    return any(running) and not all(running)


def aggregate(endpoint: str, members: tuple[DeployView, ...]) -> DeployView:
    states = {m.state for m in members}
    if states & {DeployState.FAILED, DeployState.DELETING}:
        state = DeployState.FAILED
    elif states == {DeployState.STOPPED}:
        state = DeployState.STOPPED
    elif states == {DeployState.READY}:
        state = DeployState.READY
    elif states <= {DeployState.STOPPED, DeployState.STOPPING}:
        state = DeployState.STOPPING
    else:
        state = DeployState.UPDATING
    first = members[0]
    etag = hashlib.sha256("|".join(f"{m.id}:{m.etag}" for m in members).encode()).hexdigest()[:16]
    return DeployView(
        id=endpoint,
        kind=first.kind,
        state=state,
        etag=etag,
        aliases=tuple(sorted({a for m in members for a in m.aliases})),
        project=first.project,
        cmp_managed=True,
        endpoint=endpoint,
        gpus_per_replica=sum(m.gpus_per_replica for m in members),
        nodes_per_replica=1,
        desired_replicas=1,
        ready_replicas=1 if state is DeployState.READY else 0,
        generation=max(m.generation for m in members),
        applied_generation=min(m.applied_generation for m in members),
        terminating_pods=sum(m.terminating_pods for m in members),
        unschedulable=any(m.unschedulable for m in members),
    )


def start_members(core: DeployControl, endpoint: str, key: str) -> list[Operation]:
    """Start every member in order; on a failure stop the ones started (compensation)."""
    members = core.list_members(endpoint)
    receipt: dict[str, dict[str, Any]] = {m.id: {"result": "not_attempted"} for m in members}
    ops: list[Operation] = []
    for m in members:
        try:
            ops.append(core.start(m.id, etag=m.etag, idempotency_key=f"{key}/{m.id}"))
            receipt[m.id] = {"result": "ok", "operation": ops[-1].id}
        except Transient:
            raise  # resubmitted later with the same keys: no compensation for a lost answer
        except CoreError as exc:
            receipt[m.id] = {"result": "failed", "error": f"{type(exc).__name__}: {exc}"}
            _compensate(core, [x for x in members if receipt[x.id]["result"] == "ok"], key, receipt)
            raise PartialExecution(receipt, ops) from exc
    return ops


def _compensate(
    core: DeployControl, started: list[DeployView], key: str, receipt: dict[str, dict[str, Any]]
) -> None:
    for m in started:
        try:
            fresh = core.get_deploy(m.id)
            core.stop(
                m.id,
                etag=fresh.etag,
                allow_aliased_downtime=True,
                idempotency_key=f"{key}/{m.id}/compensate",
            )
            receipt[m.id] = {**receipt[m.id], "result": "compensated"}
        except CoreError as exc:
            receipt[m.id] = {
                **receipt[m.id],
                "result": "compensation_failed",
                "error": f"{type(exc).__name__}: {exc}",
            }


def stop_members(
    core: DeployControl, endpoint: str, key: str, *, allow_aliased_downtime: bool
) -> list[Operation]:
    """Stop every member; a failure mid-group is reported, the others keep going."""
    members = core.list_members(endpoint)
    receipt: dict[str, dict[str, Any]] = {}
    ops: list[Operation] = []
    for m in members:
        try:
            ops.append(
                core.stop(
                    m.id,
                    etag=m.etag,
                    allow_aliased_downtime=allow_aliased_downtime,
                    idempotency_key=f"{key}/{m.id}",
                )
            )
            receipt[m.id] = {"result": "ok", "operation": ops[-1].id}
        except Transient:
            raise
        except CoreError as exc:
            receipt[m.id] = {"result": "failed", "error": f"{type(exc).__name__}: {exc}"}
    if any(r["result"] != "ok" for r in receipt.values()):
        raise PartialExecution(receipt, ops)
    return ops


def member_ids(core: DeployReads, deploy: DeployView) -> list[str]:
    """The deploys a target stands for: itself, or an endpoint's members."""
    if deploy.endpoint is not None and deploy.id == deploy.endpoint:
        return [m.id for m in core.list_members(deploy.id)]
    return [deploy.id]


def preview(core: PreviewingReads, target: str, delta_replicas: int) -> CapacityPreview:
    """Capacity preview of a target; an endpoint fits when every member's first group fits."""
    try:
        return core.preview_capacity(target, delta_replicas=delta_replicas)
    except NotFound:
        members = core.list_members(target)
    result: CapacityPreview | None = None
    for m in members:
        result = core.preview_capacity(m.id, delta_replicas=1)
        if isinstance(result, Insufficient):
            return result
    assert result is not None
    return result
