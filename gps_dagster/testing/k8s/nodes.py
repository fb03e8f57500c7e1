"""Fake GPU Nodes: registration, status, and the Lease heartbeat a kubelet would send.

A Node is created through the API with ``nvidia.com/gpu`` capacity, the GPU flavor and region
labels, and ``Ready=True`` set through the status subresource. The API server's admission taints
a new Node ``not-ready`` until the node lifecycle controller sees it Ready, so ``register`` waits
for the taint to go. The Lease in ``kube-node-lease`` must be renewed every 10 s (wall time: the
controller's clock), or the Node goes ``Ready=Unknown`` after ~40 s and is tainted unreachable.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube
from gps_dagster.ports import CoreError, NotFound

LEASE_NAMESPACE = "kube-node-lease"
HEARTBEAT_S = 10.0
FAKE_KUBELET = "v1.20.2-gps-fake-kubelet"
GPU_TAINT = {"key": names.GPU, "value": "present", "effect": "NoSchedule"}
"""What GKE puts on every GPU node (``nvidia.com/gpu=present:NoSchedule``, "Running GPUs in GKE
Standard node pools"): only pods that tolerate it — through ExtendedResourceToleration for pods
requesting ``nvidia.com/gpu`` — land there."""


@dataclass(frozen=True, slots=True)
class GpuNode:
    name: str
    uuids: tuple[str, ...]
    flavor: str = "H100-80GB"
    region: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_memory_mib: int = 81559

    @property
    def gpus(self) -> int:
        return len(self.uuids)

    def all_labels(self) -> dict[str, str]:
        return {
            names.HOSTNAME: self.name,
            names.GPU_PRODUCT: self.flavor,
            names.REGION: self.region,
            "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
            **self.labels,
        }


def wall_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(node: GpuNode, allocatable_gpus: int) -> dict[str, Any]:
    now = wall_iso()
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "capacity": {**resources, names.GPU: str(node.gpus)},
        "allocatable": {**resources, names.GPU: str(allocatable_gpus)},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "fake kubelet is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "nodeInfo": {
            "kubeletVersion": FAKE_KUBELET,
            "kubeProxyVersion": FAKE_KUBELET,
            "machineID": node.name,
            "systemUUID": node.name,
            "bootID": node.name,
            "kernelVersion": "fake",
            "osImage": "fake",
            "containerRuntimeVersion": "fake://0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "addresses": [{"type": "Hostname", "address": node.name}],
    }


def register(
    kube: Kube, nodes: Sequence[GpuNode], allocatable: Mapping[str, int], *, timeout_s: float = 30
) -> None:
    """Create the Nodes and their Leases, then wait until every Node is schedulable."""
    for node in nodes:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": node.all_labels()},
            "spec": {"taints": [dict(GPU_TAINT)]} if node.gpus else {},  # GPU nodes only
        }
        kube.call(kube.core.create_node, body, what=f"create node {node.name}", mutating=True)
        set_status(kube, node, allocatable[node.name])
        renew(kube, node.name)
    deadline = time.monotonic() + timeout_s
    pending = {n.name for n in nodes}
    while pending:
        for name in sorted(pending):
            obj = kube.call(kube.core.read_node, name, what=f"read node {name}")
            if not [t for t in (obj.get("spec") or {}).get("taints") or [] if t != GPU_TAINT]:
                pending.discard(name)  # only the GPU taint left: the not-ready taints are gone
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"nodes still tainted after {timeout_s} s: {sorted(pending)}")
        if pending:
            time.sleep(0.05)


def set_status(kube: Kube, node: GpuNode, allocatable_gpus: int) -> None:
    kube.call(
        kube.core.patch_node_status,
        node.name,
        {"status": node_status(node, allocatable_gpus)},
        what=f"node {node.name} status",
        mutating=True,
        _content_type="application/strategic-merge-patch+json",
    )


def set_allocatable(kube: Kube, node: GpuNode, allocatable_gpus: int) -> None:
    body = {"status": {"allocatable": {names.GPU: str(allocatable_gpus)}}}
    kube.call(
        kube.core.patch_node_status,
        node.name,
        body,
        what=f"node {node.name} allocatable",
        mutating=True,
        _content_type="application/strategic-merge-patch+json",
    )


def renew(kube: Kube, node_name: str) -> None:
    spec = {"holderIdentity": node_name, "leaseDurationSeconds": 40, "renewTime": micro_iso()}
    try:
        kube.call(
            kube.coordination.patch_namespaced_lease,
            node_name,
            LEASE_NAMESPACE,
            {"spec": spec},
            what=f"renew lease {node_name}",
            mutating=True,
            _content_type="application/merge-patch+json",
        )
    except NotFound:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node_name, "namespace": LEASE_NAMESPACE},
            "spec": spec,
        }
        kube.call(
            kube.coordination.create_namespaced_lease,
            LEASE_NAMESPACE,
            body,
            what=f"create lease {node_name}",
            mutating=True,
        )


def unregister(kube: Kube, node_names: Sequence[str]) -> None:
    for name in node_names:
        for fn, args in (
            (kube.core.delete_node, (name,)),
            (kube.coordination.delete_namespaced_lease, (name, LEASE_NAMESPACE)),
        ):
            with contextlib.suppress(NotFound):
                kube.call(fn, *args, what=f"delete {name}", mutating=True)


class Heartbeat:
    """Renews the Leases of some nodes every ``HEARTBEAT_S`` seconds on a daemon thread."""

    def __init__(
        self, kube: Kube, node_names: Sequence[str], *, every_s: float = HEARTBEAT_S
    ) -> None:
        self.kube, self.node_names, self.every_s = kube, list(node_names), every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gps-fake-lease", daemon=True)
        self.errors: list[str] = []

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for name in list(self.node_names):
                try:
                    renew(self.kube, name)
                except CoreError as exc:  # the control plane may be stopping; keep trying
                    self.errors.append(str(exc))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
