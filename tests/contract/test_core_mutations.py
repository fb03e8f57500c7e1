"""Contract: ETags, idempotency, stop convergence, replica intent, readiness."""

from __future__ import annotations

import pytest
from contract_harness import Harness
from contract_pools import seed10, split16

from gps_dagster.ports import (
    DeployState,
    EtagMismatch,
    NotFound,
    OperationKind,
    OperationState,
    Permanent,
)


def test_get_deploy_reports_the_declared_deploy(harness: Harness) -> None:
    core = harness.load(seed10())
    a = core.get_deploy("A")
    assert (a.state, a.aliases, a.gpus_per_replica, a.nodes_per_replica) == (
        DeployState.STOPPED,
        ("chat-prod",),
        8,
        1,
    )
    assert (a.desired_replicas, a.ready_replicas, a.terminating_pods, a.project, a.cmp_managed) == (
        1,
        0,
        0,
        None,
        False,
    )
    b = core.get_deploy("B")
    assert (b.state, b.ready_replicas, b.generation, b.applied_generation) == (
        DeployState.READY,
        1,
        b.generation,
        b.generation,
    )
    with pytest.raises(NotFound):
        core.get_deploy("nope")


def test_replayed_key_returns_the_same_operation_and_mutates_once(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    first = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k-stop-B")
    after = core.get_deploy("B")
    again = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k-stop-B")
    assert again.id == first.id and again.etag_after == first.etag_after
    assert again.kind is OperationKind.STOP and again.idempotency_key == "k-stop-B"
    assert core.get_deploy("B").generation == after.generation == b.generation + 1
    assert harness.mutations("B") == 1


def test_a_key_reused_for_another_call_is_refused(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k1")
    a = core.get_deploy("A")
    with pytest.raises(Permanent) as err:
        core.start("A", etag=a.etag, idempotency_key="k1")
    assert err.value.reason == "idempotency_key_reused"


def test_stale_etag_is_refused_with_412(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    op = core.set_replica_intent("B", 1, etag=b.etag, idempotency_key="k1")
    assert op.etag_after != b.etag
    with pytest.raises(EtagMismatch) as err:
        core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k2")
    assert err.value.http_status == 412
    assert core.get_deploy("B").state is DeployState.READY


def test_another_deploys_etag_is_refused(harness: Harness) -> None:
    core = harness.load(seed10())
    c = core.get_deploy("C")
    with pytest.raises(EtagMismatch):
        core.stop("B", etag=c.etag, allow_aliased_downtime=False, idempotency_key="k")


def test_stop_converges_only_after_terminating_pods_are_gone(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    op = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    view = core.get_deploy("B")
    assert view.terminating_pods == 1 and not view.converged_stopped
    assert core.get_operation(op.id).state is OperationState.ACCEPTED
    harness.advance(29)
    assert core.get_deploy("B").terminating_pods == 1
    harness.advance(1)
    view = core.get_deploy("B")
    assert (
        view.state is DeployState.STOPPED and view.terminating_pods == 0 and view.converged_stopped
    )
    assert core.get_operation(op.id).state is OperationState.DONE


def test_start_becomes_ready_after_the_start_delay(harness: Harness) -> None:
    core = harness.load(split16())
    small = core.get_deploy("small")
    op = core.start("small", etag=small.etag, idempotency_key="k")
    view = core.get_deploy("small")
    assert view.state is DeployState.STARTING and view.generation == small.generation + 1
    assert view.applied_generation == view.generation and not view.unschedulable
    harness.advance(119)
    assert core.get_deploy("small").state is DeployState.STARTING
    harness.advance(1)
    view = core.get_deploy("small")
    assert (view.state, view.ready_replicas) == (DeployState.READY, 1)
    assert core.get_operation(op.id).state is OperationState.DONE


def test_replica_intent_on_a_stopped_deploy_only_persists(harness: Harness) -> None:
    core = harness.load(split16())
    before = core.get_deploy("small")
    op = core.set_replica_intent("small", 2, etag=before.etag, idempotency_key="k")
    view = core.get_deploy("small")
    assert op.persist_only and op.state is OperationState.DONE and op.replicas == 2
    assert op.etag_after == view.etag != before.etag
    assert (view.state, view.desired_replicas, view.role_min, view.role_max) == (
        DeployState.STOPPED,
        2,
        2,
        2,
    )
    assert view.ready_replicas == 0 and view.terminating_pods == 0
    core.start("small", etag=view.etag, idempotency_key="k2")
    harness.advance(120)
    assert core.get_deploy("small").ready_replicas == 2


def test_scale_down_releases_one_group_and_up_adds_one(harness: Harness) -> None:
    core = harness.load(split16())
    f1 = core.get_deploy("f1")
    core.set_replica_intent("f1", 2, etag=f1.etag, idempotency_key="up")
    view = core.get_deploy("f1")
    assert (view.state, view.desired_replicas, view.ready_replicas) == (DeployState.UPDATING, 2, 1)
    harness.advance(120)
    view = core.get_deploy("f1")
    assert (view.state, view.ready_replicas, view.applied_generation) == (
        DeployState.READY,
        2,
        view.generation,
    )
    core.set_replica_intent("f1", 1, etag=view.etag, idempotency_key="down")
    view = core.get_deploy("f1")
    assert (view.desired_replicas, view.ready_replicas, view.terminating_pods) == (1, 1, 1)
    harness.advance(30)
    assert core.get_deploy("f1").terminating_pods == 0


def test_start_on_a_running_deploy_changes_nothing(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    op = core.start("B", etag=b.etag, idempotency_key="k")
    assert op.etag_after == b.etag and core.get_deploy("B").generation == b.generation


def test_unknown_operation_is_not_found(harness: Harness) -> None:
    core = harness.load(seed10())
    with pytest.raises(NotFound):
        core.get_operation("op-nope")


def test_a_later_operation_supersedes_an_unfinished_one(harness: Harness) -> None:
    core = harness.load(split16())
    small = core.get_deploy("small")
    started = core.start("small", etag=small.etag, idempotency_key="k1")
    core.stop("small", etag=started.etag_after, allow_aliased_downtime=False, idempotency_key="k2")
    assert core.get_operation(started.id).state is OperationState.SUPERSEDED
