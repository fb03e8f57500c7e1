"""The real node (issue 19): pods run by the real kubelet 1.20 + containerd, GPUs from the fake
device plugin on the real deviceplugin/v1beta1 API, the witness from the kubelet's PodResources.

``make test`` starts the node with the control plane (``tools/with_k8s.py``: ``GPS_TEST_REAL_NODE``);
run alone, this module starts one itself. A missing prerequisite fails (``NodeError``), never skips.
All tests of this module share the node's 4 GPUs, so they live in one file (``--dist loadfile``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.backends.k8s import Kube, connect, names, nodeagent
from gps_dagster.domain.gps.witness import Mismatch, annotation_uuids, judge
from gps_dagster.testing.k8s import realnode


class Node:
    def __init__(self, kube: Kube, name: str, root: Path, uuids: tuple[str, ...]) -> None:
        self.kube, self.name, self.root, self.uuids = kube, name, root, uuids

    @property
    def pod_resources(self) -> str:
        return str(self.root / "kubelet" / "pod-resources" / "kubelet.sock")

    def control(self, **doc: list[str]) -> None:
        """Tell the device plugin which GPUs are unhealthy / preferred; return once it applied it."""
        text = json.dumps({"nonce": uuid.uuid4().hex, **doc})
        tmp = self.root / "gpus.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.root / "gpus.json")
        applied = self.root / "gpus.json.applied"
        wait_for("the device plugin to apply the control file",
                 lambda: applied.exists() and applied.read_text() == text, timeout_s=15)

    def allocatable(self) -> str:
        return str(self.kube.core.read_node(self.name).status.allocatable.get(names.GPU))


@pytest.fixture(scope="module")
def node(k8s_cluster: str) -> Iterator[Node]:
    kube = Kube(connect(k8s_cluster, None))
    name = os.environ.get("GPS_TEST_REAL_NODE")
    started = None
    if name:
        root = Path(os.environ["GPS_TEST_REAL_NODE_DIR"])
        uuids = tuple(os.environ["GPS_TEST_REAL_NODE_GPUS"].split(","))
    else:
        root = Path(k8s_cluster).parent / f"node-{os.getpid()}"
        started = realnode.start(root, Path(k8s_cluster), uuids=realnode.gpu_uuids(4))
        name, uuids = started.name, started.uuids
    n = Node(kube, name, root, uuids)
    n.control()
    yield n
    n.control()
    if started is not None:
        started.stop()


@pytest.fixture
def ns(node: Node) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    node.kube.core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while not [s for s in node.kube.core.list_namespaced_secret(name).items if s.metadata.name.startswith("default-token")]:
        assert time.monotonic() < deadline, "no default token in the namespace"
        time.sleep(0.2)
    yield name
    node.kube.core.delete_namespace(name, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while node.kube.core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.5)
    node.control()


def standin_pod(name: str, node: str, *, gpus: int = 1, grace_s: int = 30, **env: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
            "tolerations": [realnode.REAL_NODE_TOLERATION],
            "terminationGracePeriodSeconds": grace_s,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [
                {
                    "name": "server",
                    "image": realnode.STANDIN_IMAGE,
                    "env": [{"name": k, "value": str(v)} for k, v in env.items()],
                    "resources": {"limits": {names.GPU: str(gpus)}} if gpus else {},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8000}, "periodSeconds": 1},
                    "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


def wait_for(what: str, check: Callable[[], Any], *, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def ready(node: Node, ns: str, name: str) -> bool:
    pod = node.kube.core.read_namespaced_pod(name, ns)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_device_plugin_gpus_become_allocatable_and_unhealthy_lowers_it(node: Node) -> None:
    assert node.allocatable() == str(len(node.uuids))
    node.control(unhealthy=[node.uuids[0]])
    wait_for("allocatable 3", lambda: node.allocatable() == str(len(node.uuids) - 1), timeout_s=30)
    node.control()
    wait_for("allocatable back", lambda: node.allocatable() == str(len(node.uuids)), timeout_s=30)


def test_readiness_comes_from_the_probe_after_the_load_time(node: Node, ns: str) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("slow", node.name, gpus=0, LOAD_S=4))
    running = wait_for("running", lambda: node.kube.core.read_namespaced_pod("slow", ns).status.phase == "Running")
    assert running
    t0 = time.monotonic()
    assert not ready(node, ns, "slow"), "Ready before the model loaded: no probe ran"
    wait_for("ready", lambda: ready(node, ns, "slow"), timeout_s=60)
    assert time.monotonic() - t0 >= 1.5  # the probe, not a fixed delay, made it Ready


def test_the_witness_comes_from_the_kubelets_podresources(node: Node, ns: str) -> None:
    node.control(prefer=[node.uuids[2]])  # the kubelet asks GetPreferredAllocation: this one
    node.kube.core.create_namespaced_pod(ns, standin_pod("gpu", node.name, gpus=1))
    wait_for("ready", lambda: ready(node, ns, "gpu"), timeout_s=90)
    source = nodeagent.source_from(pod_resources_socket=node.pod_resources, dcgm_url=None)
    found = source.devices()
    assert found[(ns, "gpu")] == {"server": (node.uuids[2],)}
    assert nodeagent.publish(node.kube, node.name, source) >= 1
    pod = node.kube.api_client.sanitize_for_serialization(node.kube.core.read_namespaced_pod("gpu", ns))
    assert annotation_uuids(pod) == (node.uuids[2],)  # what the adapter's witness reads
    assert pod["metadata"]["annotations"][names.AGENT_SOURCE] == "podresources"
    assert nodeagent.publish(node.kube, node.name, source) == 0  # idempotent: nothing changed


def test_a_gpu_outside_the_reservation_is_a_placement_mismatch(node: Node, ns: str) -> None:
    reserved = node.uuids[:2]
    node.control(prefer=[node.uuids[3]])  # the plugin steers the kubelet off the reservation
    node.kube.core.create_namespaced_pod(ns, standin_pod("off", node.name, gpus=1))
    wait_for("ready", lambda: ready(node, ns, "off"), timeout_s=90)
    nodeagent.publish(node.kube, node.name, nodeagent.PodResourcesSource(socket=node.pod_resources))
    pod = node.kube.api_client.sanitize_for_serialization(node.kube.core.read_namespaced_pod("off", ns))
    verdict = judge(annotation_uuids(pod), "rsv-1", reserved, source="node_agent_podresources")
    assert isinstance(verdict, Mismatch)
    assert verdict.outside == (node.uuids[3],) and verdict.reason == "placement_mismatch"


def test_the_node_agent_command_annotates_and_stops_on_sigterm(node: Node, ns: str, k8s_cluster: str) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("agent", node.name, gpus=1))
    wait_for("ready", lambda: ready(node, ns, "agent"), timeout_s=90)
    agent = subprocess.Popen(
        [str(Path(sys.executable).with_name("gps-dagster")), "node-agent", "--node", node.name,
         "--pod-resources-socket", node.pod_resources, "--kubeconfig", k8s_cluster, "--interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    def annotated() -> str | None:
        assert agent.poll() is None, "the agent exited"
        ann = node.kube.core.read_namespaced_pod("agent", ns).metadata.annotations or {}
        return ann.get(names.agent_device_annotation("server"))

    try:
        got = wait_for("the agent's annotation", annotated, timeout_s=120)  # CLI start is slow under load
    except AssertionError:
        agent.kill()
        raise AssertionError("agent output: " + agent.communicate(timeout=15)[0].decode(errors="replace")) from None
    agent.send_signal(signal.SIGTERM)
    out = agent.communicate(timeout=30)[0].decode(errors="replace")
    assert got in node.uuids
    assert agent.returncode == 0, out


def test_graceful_termination_is_the_containers_drain(node: Node, ns: str) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("drain", node.name, gpus=1, DRAIN_S=3))
    wait_for("ready", lambda: ready(node, ns, "drain"), timeout_s=90)
    t0 = time.monotonic()
    node.kube.core.delete_namespaced_pod("drain", ns)

    def gone() -> bool:
        return not [p for p in node.kube.core.list_namespaced_pod(ns).items if p.metadata.name == "drain"]

    wait_for("pod gone", gone, timeout_s=60)
    took = time.monotonic() - t0
    assert 3 <= took < 30, f"deletion took {took:.1f} s: the drain (3 s) decides, not the 30 s grace"


def test_a_crashing_server_ends_in_crash_loop_back_off(node: Node, ns: str) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("crash", node.name, gpus=0, CRASH_AFTER_S=1))

    def waiting_reason() -> str | None:
        st = node.kube.core.read_namespaced_pod("crash", ns).status.container_statuses or []
        w = st[0].state.waiting if st else None
        return w.reason if w is not None and w.reason == "CrashLoopBackOff" else None

    assert wait_for("CrashLoopBackOff", waiting_reason, timeout_s=90) == "CrashLoopBackOff"
    st = node.kube.core.read_namespaced_pod("crash", ns).status.container_statuses[0]
    assert st.last_state.terminated.exit_code == 3


def test_pods_that_do_not_tolerate_the_real_node_stay_off_it(node: Node, ns: str) -> None:
    body = standin_pod("intruder", node.name, gpus=1)
    body["spec"].pop("tolerations")
    node.kube.core.create_namespaced_pod(ns, body)

    def unschedulable() -> bool:
        pod = node.kube.core.read_namespaced_pod("intruder", ns)
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or [])

    assert wait_for("the scheduler's verdict", unschedulable, timeout_s=30)
    assert node.kube.core.read_namespaced_pod("intruder", ns).spec.node_name is None
