"""Contract: publish lag, per-node preview, foreign workloads and intruders."""

from __future__ import annotations

from contract_harness import Harness
from contract_pools import seed10, split16

from gps_dagster.ports import DeployState, Fits, Insufficient


def test_capacity_appears_only_after_the_publish_lag(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert isinstance(core.preview_capacity("A", delta_replicas=1), Insufficient)
    harness.advance(30)  # pods gone, GPUs released but not yet published
    assert core.get_deploy("B").terminating_pods == 0
    harness.advance(59)
    early = core.preview_capacity("A", delta_replicas=1)
    assert isinstance(early, Insufficient) and early.free_by_node == {"hgx-01": 2}
    harness.advance(1)
    assert core.preview_capacity("A", delta_replicas=1) == Fits(groups=1)


def test_preview_fits_per_node_not_in_total(harness: Harness) -> None:
    core = harness.load(split16())
    big = core.preview_capacity("big", delta_replicas=1)
    assert isinstance(big, Insufficient)
    assert big.reason == "insufficient_capacity" and dict(big.free_by_node) == {"n1": 4, "n2": 4}
    assert (big.groups_needed, big.groups_fitting) == (1, 0)
    assert core.preview_capacity("wide", delta_replicas=1) == Fits(groups=1)  # 2 nodes x 4
    assert isinstance(core.preview_capacity("wide", delta_replicas=2), Insufficient)
    assert core.preview_capacity("small", delta_replicas=2) == Fits(groups=2)
    assert isinstance(core.preview_capacity("small", delta_replicas=3), Insufficient)


def test_preview_is_read_only(harness: Harness) -> None:
    core = harness.load(split16())
    before = core.get_deploy("small")
    core.preview_capacity("small", delta_replicas=1)
    assert core.get_deploy("small") == before
    assert core.preview_capacity("small", delta_replicas=2) == Fits(groups=2)


def test_a_multi_node_group_never_spans_more_nodes_than_declared(harness: Harness) -> None:
    core = harness.load(split16())
    wide = core.get_deploy("wide")
    core.start("wide", etag=wide.etag, idempotency_key="k")
    harness.advance(120)
    view = core.get_deploy("wide")
    assert (view.state, view.ready_replicas) == (DeployState.READY, 1)
    assert isinstance(core.preview_capacity("small", delta_replicas=1), Insufficient)


def test_an_unplaceable_start_stays_pending_and_unschedulable(harness: Harness) -> None:
    core = harness.load(split16())
    big = core.get_deploy("big")
    core.start("big", etag=big.etag, idempotency_key="k")
    harness.advance(600)
    view = core.get_deploy("big")
    assert view.state is DeployState.STARTING and view.unschedulable and view.ready_replicas == 0
    assert view.applied_generation < view.generation


def test_a_pending_group_is_placed_when_capacity_is_published(harness: Harness) -> None:
    core = harness.load(split16())
    big = core.get_deploy("big")
    core.start("big", etag=big.etag, idempotency_key="k1")
    f1 = core.get_deploy("f1")
    core.stop("f1", etag=f1.etag, allow_aliased_downtime=False, idempotency_key="k2")
    harness.advance(89)
    assert core.get_deploy("big").unschedulable
    harness.advance(1)
    view = core.get_deploy("big")
    assert not view.unschedulable and view.state is DeployState.STARTING
    harness.advance(120)
    assert core.get_deploy("big").state is DeployState.READY


def test_an_intruder_grabs_published_gpus(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.add_foreign("intruder", 8, "intruder")
    b = core.get_deploy("B")
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    harness.advance(90)
    preview = core.preview_capacity("A", delta_replicas=1)
    assert isinstance(preview, Insufficient) and dict(preview.free_by_node) == {}
    harness.advance(3600)
    assert isinstance(core.preview_capacity("A", delta_replicas=1), Insufficient)


def test_a_static_foreign_workload_holds_gpus_until_removed(harness: Harness) -> None:
    core = harness.load(split16())
    harness.add_foreign("job", 4, "static")
    assert core.preview_capacity("small", delta_replicas=1) == Fits(groups=1)
    assert isinstance(core.preview_capacity("small", delta_replicas=2), Insufficient)
    harness.remove_foreign("job")
    harness.advance(89)
    assert isinstance(core.preview_capacity("small", delta_replicas=2), Insufficient)
    harness.advance(1)
    assert core.preview_capacity("small", delta_replicas=2) == Fits(groups=2)
