"""FakeCore's own surface beyond the Core contract: the handler, the instant default, refusals."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.ports import DeployState, OperationKind, OperationState, Submission, Transient
from gps_dagster.testing import INSTANT, CoreCall, FakeCore, NotModelled

T0 = datetime(2026, 10, 19, 10, 0, tzinfo=UTC)
POOL = {
    "name": "p",
    "nodes": [{"name": "n1", "gpus": 8}],
    "deploys": [
        {"id": "a", "gpus_per_replica": 8, "state": "running"},
        {"id": "b", "gpus_per_replica": 8},
    ],
}


def test_the_handler_sees_every_call_with_its_arguments_and_submit_many_as_single_calls() -> None:
    seen: list[CoreCall] = []

    def record(call: CoreCall, proceed: Callable[[], object]) -> object:
        seen.append(call)
        return proceed()

    core = FakeCore(load_pool(POOL), VirtualClock(T0), handler=record)
    a = core.get_deploy("a")
    core.submit_many([Submission(OperationKind.STOP, "a", a.etag, "k-a")])
    assert [(c.method, c.deploy_id) for c in seen] == [("get_deploy", "a"), ("stop", "a")]
    assert seen[1].args == {
        "etag": a.etag,
        "allow_aliased_downtime": False,
        "idempotency_key": "k-a",
    }


def test_a_handler_raising_after_proceed_loses_the_answer_but_not_the_mutation() -> None:
    def lose(call: CoreCall, proceed: Callable[[], object]) -> object:
        result = proceed()
        if call.method == "stop":
            raise Transient("lost", reason="response_lost")
        return result

    core = FakeCore(load_pool(POOL), VirtualClock(T0), handler=lose)
    a = core.get_deploy("a")
    with pytest.raises(Transient):
        core.stop("a", etag=a.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert core.get_deploy("a").state is DeployState.STOPPED and core.mutations("a") == 1


def test_instant_timings_still_report_the_stop_unconverged_until_the_next_call() -> None:
    clock = VirtualClock(T0)
    core = FakeCore(load_pool(POOL), clock)  # INSTANT by default
    assert core.pool.timings == INSTANT
    a = core.get_deploy("a")
    op = core.stop("a", etag=a.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert op.state is OperationState.ACCEPTED  # its pods were terminating when it answered
    assert core.get_deploy("a").converged_stopped
    b = core.get_deploy("b")
    core.start("b", etag=b.etag, idempotency_key="k2")  # the GPUs are published at once
    assert core.get_deploy("b").state is DeployState.READY


def test_a_pool_it_does_not_model_is_refused_not_approximated() -> None:
    doc = {**POOL, "sim": {"faults": [{"effect": "never_ready", "deploy": "b"}]}}
    with pytest.raises(NotModelled, match="handler"):
        FakeCore(load_pool(doc), VirtualClock(T0))
    too_big = {
        **POOL,
        "deploys": [{"id": "a", "gpus_per_replica": 8, "replicas": 2, "state": "running"}],
    }
    with pytest.raises(NotModelled, match="does not fit"):
        FakeCore(load_pool(too_big), VirtualClock(T0))
