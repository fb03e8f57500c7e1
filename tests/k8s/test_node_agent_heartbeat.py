"""The node agent's heartbeat and the witness's bound on it, on an injected clock (no cluster).

The agent stamps ``names.AGENT_SEEN_AT`` on every pod it publishes devices for and re-stamps it
once it is ``HEARTBEAT_S`` old; the adapter's witness refuses a record older than
``STALE_AFTER_S`` with ``witness_unavailable`` and the fix. Mutations caught: an agent that never
re-stamps (``test_the_agent_restamps_only_once_the_heartbeat_is_due``), a witness that trusts a
stale record (``test_a_stale_record_is_witness_unavailable_with_the_fix``). The real-node half is
``tests/k8s/test_real_node.py::test_a_dead_agents_stale_witness_is_witness_unavailable``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gps_dagster.backends.k8s import names, nodeagent, witness
from gps_dagster.backends.k8s.workloads import from_object
from gps_dagster.clocks import VirtualClock
from gps_dagster.ports import Transient

T0 = datetime(2026, 10, 19, 8, 0, tzinfo=UTC)
GPU = "GPU-11111111-2222-3333-4444-555555555555"


class FakeKube:
    """Just what ``nodeagent.annotate`` calls: a strategic-merge patch of pod annotations."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        self.patches = 0
        self.core = self

    def call(self, fn: Any, *args: Any, **_: Any) -> Any:
        return fn(*args)

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patches += 1
        ann = self.pods[(namespace, name)]["metadata"].setdefault("annotations", {})
        ann.update(body["metadata"]["annotations"])


def pod(name: str = "m-0") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "serving", "labels": {"app": "m"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "server"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def workload() -> Any:
    return from_object("Deployment", {
        "metadata": {"name": "m", "namespace": "serving", "uid": "u", "resourceVersion": "1",
                     "generation": 1, "labels": {names.DEPLOY_ID: "m"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "m"}},
                 "template": {"spec": {}}},
        "status": {},
    })  # fmt: skip


FOUND = {("serving", "m-0"): {"server": (GPU,)}}


def test_the_agent_stamps_its_clocks_instant_on_what_it_publishes() -> None:
    clock = VirtualClock(T0)
    kube = FakeKube(pod())
    assert nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources", now=clock.now()) == 1  # type: ignore[arg-type]
    ann = kube.pods[("serving", "m-0")]["metadata"]["annotations"]
    assert ann[names.AGENT_SEEN_AT] == "2026-10-19T08:00:00+00:00"
    assert ann[names.agent_device_annotation("server")] == GPU


def test_the_agent_restamps_only_once_the_heartbeat_is_due() -> None:
    clock = VirtualClock(T0)
    kube = FakeKube(pod())
    nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources", now=clock.now())  # type: ignore[arg-type]
    clock.advance(nodeagent.HEARTBEAT_S - 1)
    assert nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources", now=clock.now()) == 0  # type: ignore[arg-type]
    clock.advance(1)
    assert nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources", now=clock.now()) == 1  # type: ignore[arg-type]
    got = nodeagent.seen_at(kube.pods[("serving", "m-0")])
    assert got == T0 + timedelta(seconds=nodeagent.HEARTBEAT_S)
    assert kube.patches == 2  # one write per heartbeat, not one per sync


def test_without_a_clock_nothing_is_stamped() -> None:
    """The fake nodes' path (and any caller without a clock): the record as before, no stamp."""
    kube = FakeKube(pod())
    nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources")  # type: ignore[arg-type]
    assert names.AGENT_SEEN_AT not in kube.pods[("serving", "m-0")]["metadata"]["annotations"]


def test_a_stale_record_is_witness_unavailable_with_the_fix() -> None:
    clock = VirtualClock(T0)
    kube = FakeKube(pod())
    nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources", now=clock.now())  # type: ignore[arg-type]
    own = list(kube.pods.values())
    clock.advance(nodeagent.STALE_AFTER_S)  # at the bound: still trusted
    assert witness.witness(workload(), own, now=clock.now()).uuids == (GPU,)
    clock.advance(1)
    with pytest.raises(Transient) as err:
        witness.witness(workload(), own, now=clock.now())
    assert err.value.reason == "witness_unavailable"
    assert "node-agent DaemonSet" in str(err.value) and "n1" in str(err.value)
    nodeagent.annotate(kube, kube.pods.values(), FOUND, "podresources", now=clock.now())  # type: ignore[arg-type]
    assert witness.witness(workload(), list(kube.pods.values()), now=clock.now()).uuids == (
        GPU,
    )  # re-confirmed


def test_a_pod_without_devices_is_not_a_stale_agent() -> None:
    """No GPU (no device annotation) is "no evidence", not ``witness_unavailable``."""
    bare = pod()
    bare["metadata"]["annotations"] = {names.AGENT_SEEN_AT: "2026-10-19T07:00:00+00:00"}
    assert witness.witness(workload(), [bare], now=T0).uuids == ()
