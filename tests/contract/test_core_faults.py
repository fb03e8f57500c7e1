"""Contract: every injected fault behaves as declared.

``SimulatedCrash`` is the harness's way to stop a caller dead at a named point;
it is part of the fault vocabulary, not of the port.
"""

from __future__ import annotations

from typing import Any

import pytest
from contract_harness import Harness
from contract_pools import accounts, seed10, split16

from gps_dagster.backends.sim import SimulatedCrash
from gps_dagster.domain.errors import GpsError
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.ports import AdmissionRefused, DeployState, OperationState, Permanent, Transient


def fault(**data: Any) -> FaultSpec:
    return FaultSpec.model_validate(data)


def test_fail_next_fails_one_call_without_mutating(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.inject(fault(effect="fail_next", op="stop", deploy="B"))
    b = core.get_deploy("B")
    with pytest.raises(Transient):
        core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert core.get_deploy("B") == b and harness.mutations("B") == 0
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert core.get_deploy("B").state is DeployState.STOPPED


def test_fail_next_can_be_permanent_and_hit_reads(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.inject(fault(effect="fail_next", op="preview_capacity", error="permanent", times=2))
    for _ in range(2):
        with pytest.raises(Permanent):
            core.preview_capacity("A", delta_replicas=1)
    core.preview_capacity("A", delta_replicas=1)


def test_lost_response_is_applied_once_and_replay_returns_the_operation(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.inject(fault(effect="lose_response", op="stop", deploy="B"))
    b = core.get_deploy("B")
    with pytest.raises(Transient):
        core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    applied = core.get_deploy("B")
    assert applied.state is DeployState.STOPPED and applied.generation == b.generation + 1
    op = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert op.etag_after == applied.etag and harness.mutations("B") == 1
    assert core.get_deploy("B").generation == applied.generation


def test_crash_before_commit_applies_nothing(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.inject(fault(effect="crash", op="stop", deploy="B", point="before_commit"))
    b = core.get_deploy("B")
    with pytest.raises(SimulatedCrash) as err:
        core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert not isinstance(err.value, GpsError) and not isinstance(err.value, Exception)
    assert err.value.point == "before_commit"
    assert core.get_deploy("B") == b and harness.mutations("B") == 0
    op = core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert op.state is OperationState.ACCEPTED and harness.mutations("B") == 1


def test_crash_after_commit_applies_once(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.inject(fault(effect="crash", op="stop", deploy="B", point="after_commit"))
    b = core.get_deploy("B")
    with pytest.raises(SimulatedCrash):
        core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert core.get_deploy("B").state is DeployState.STOPPED
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert harness.mutations("B") == 1


def test_crash_before_mutation(harness: Harness) -> None:
    core = harness.load(seed10())
    harness.inject(fault(effect="crash", op="start", point="before_mutation"))
    a = core.get_deploy("A")
    with pytest.raises(SimulatedCrash):
        core.start("A", etag=a.etag, idempotency_key="k")
    assert core.get_deploy("A") == a


def test_unschedulable_pods_never_place(harness: Harness) -> None:
    core = harness.load(split16())
    harness.inject(fault(effect="unschedulable", deploy="small"))
    small = core.get_deploy("small")
    core.start("small", etag=small.etag, idempotency_key="k")
    harness.advance(3600)
    view = core.get_deploy("small")
    assert view.unschedulable and view.state is DeployState.STARTING and view.ready_replicas == 0


def test_never_ready_places_but_never_becomes_ready(harness: Harness) -> None:
    core = harness.load(split16())
    harness.inject(fault(effect="never_ready", deploy="small"))
    small = core.get_deploy("small")
    core.start("small", etag=small.etag, idempotency_key="k")
    harness.advance(86400)
    view = core.get_deploy("small")
    assert (
        not view.unschedulable and view.state is DeployState.STARTING and view.ready_replicas == 0
    )
    assert view.applied_generation == view.generation


def test_a_broken_cmp_member_fails_its_start(harness: Harness) -> None:
    core = harness.load(accounts())
    harness.inject(fault(effect="fail_start", deploy="ep-b"))
    a, b = core.get_deploy("ep-a"), core.get_deploy("ep-b")
    core.start("ep-a", etag=a.etag, idempotency_key="s-a")
    with pytest.raises(Permanent) as err:
        core.start("ep-b", etag=b.etag, idempotency_key="s-b")
    assert err.value.reason == "start_failed"
    assert [m.state for m in core.list_members("ep")] == [DeployState.STARTING, DeployState.STOPPED]


def test_a_broken_cmp_member_fails_its_stop(harness: Harness) -> None:
    core = harness.load(accounts())
    harness.inject(fault(effect="fail_stop", deploy="ep-b"))
    ops = {
        m: core.start(m, etag=core.get_deploy(m).etag, idempotency_key=f"s-{m}")
        for m in ("ep-a", "ep-b")
    }
    core.stop(
        "ep-a", etag=ops["ep-a"].etag_after, allow_aliased_downtime=False, idempotency_key="x-a"
    )
    with pytest.raises(Permanent) as err:
        core.stop(
            "ep-b", etag=ops["ep-b"].etag_after, allow_aliased_downtime=False, idempotency_key="x-b"
        )
    assert err.value.reason == "stop_failed"
    assert [m.state for m in core.list_members("ep")] == [DeployState.STOPPED, DeployState.STARTING]


@pytest.mark.parametrize(
    ("effect", "state"), [("failed", DeployState.FAILED), ("deleting", DeployState.DELETING)]
)
def test_forced_failed_or_deleting_state(harness: Harness, effect: str, state: DeployState) -> None:
    core = harness.load(split16())
    harness.inject(fault(effect=effect, deploy="small"))
    small = core.get_deploy("small")
    assert small.state is state
    with pytest.raises(AdmissionRefused):
        core.start("small", etag=small.etag, idempotency_key="k")
