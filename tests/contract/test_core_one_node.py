"""Contract: the port's lifecycle on one 4-GPU node, the cases every harness runs — the real
node's too (``real_node_exclusions``: the other cases need more GPUs or nodes than it has).

Times are the pool's (a load and a drain of about a second). ``harness.eventually`` moves the
virtual clock by exactly that much on the simulated adapters; on the real node it waits at most
that much plus the kubelet's own bounded slack — what happens first is never asserted."""

# Decisions embodied here (docs/decisions.md):
# * “The contract suite on the real node: what fits one node”

from __future__ import annotations

import pytest
from contract_harness import Harness
from contract_pools import ONE_NODE_TIMINGS, solo4

from gps_dagster.ports import (
    DeployState,
    EtagMismatch,
    Fits,
    Insufficient,
    OperationKind,
    OperationState,
)

GRACE_S = ONE_NODE_TIMINGS["stop_grace_s"]
LOAD_S = ONE_NODE_TIMINGS["start_delay_s"]


def test_one_node_a_replayed_stop_mutates_once_and_converges_after_the_drain(
    harness: Harness,
) -> None:
    core = harness.load(solo4())
    b = core.get_deploy("B")
    assert (b.state, b.ready_replicas, b.gpus_per_replica) == (DeployState.READY, 1, 2)
    first = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="stop-B")
    again = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="stop-B")
    assert (again.id, again.kind, again.etag_after) == (
        first.id,
        OperationKind.STOP,
        first.etag_after,
    )
    assert harness.mutations("B") == 1 and core.get_deploy("B").generation == b.generation + 1
    harness.eventually(lambda: core.get_deploy("B").converged_stopped, within_s=GRACE_S)
    view = core.get_deploy("B")
    assert (view.state, view.terminating_pods, view.ready_replicas) == (DeployState.STOPPED, 0, 0)
    assert core.get_operation(first.id).state is OperationState.DONE


def test_one_node_a_start_is_ready_only_once_loaded(harness: Harness) -> None:
    core = harness.load(solo4())
    a = core.get_deploy("A")
    op = core.start("A", etag=a.etag, idempotency_key="start-A")
    view = core.get_deploy("A")
    assert (view.state, view.ready_replicas, view.unschedulable) == (DeployState.STARTING, 0, False)
    assert core.get_operation(op.id).state is OperationState.ACCEPTED
    harness.eventually(lambda: core.get_deploy("A").state is DeployState.READY, within_s=LOAD_S)
    assert core.get_deploy("A").ready_replicas == 1
    assert core.get_operation(op.id).state is OperationState.DONE


def test_one_node_a_group_larger_than_the_free_gpus_waits_for_the_release(harness: Harness) -> None:
    core = harness.load(solo4())
    preview = core.preview_capacity("wide", delta_replicas=1)
    assert isinstance(preview, Insufficient) and list(preview.free_by_node.values()) == [2]
    assert core.preview_capacity("A", delta_replicas=1) == Fits(groups=1)
    wide = core.get_deploy("wide")
    core.start("wide", etag=wide.etag, idempotency_key="start-wide")
    harness.eventually(lambda: core.get_deploy("wide").unschedulable, within_s=0)
    assert core.get_deploy("wide").state is DeployState.STARTING
    b = core.get_deploy("B")
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="stop-B")
    harness.eventually(lambda: not core.get_deploy("wide").unschedulable, within_s=GRACE_S)
    harness.eventually(lambda: core.get_deploy("wide").state is DeployState.READY, within_s=LOAD_S)
    assert (
        core.get_deploy("wide").ready_replicas == 1 and core.get_deploy("B").terminating_pods == 0
    )


def test_one_node_a_stale_etag_is_refused_and_changes_nothing(harness: Harness) -> None:
    core = harness.load(solo4())
    b = core.get_deploy("B")
    op = core.set_replica_intent("B", 1, etag=b.etag, idempotency_key="intent-B")
    assert op.etag_after != b.etag
    with pytest.raises(EtagMismatch):
        core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="stop-B")
    assert core.get_deploy("B").state is DeployState.READY and harness.mutations("B") == 1
