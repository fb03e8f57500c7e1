"""What an operator reads back from the cluster: nodes and their GPUs, pods, a deploy's story.

``pool show --backend kubernetes`` prints ``cluster_inventory``; ``describe`` gathers, for one
deploy, the workload's conditions, the Warning events of it and its pods (a refusal in the API's
own words: ``exceeded quota: …``, ``0/2 nodes are available: …``) and each pod's node, GPUs and
scheduling verdict. Read-only, through the same client and namespaces as the adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gps_dagster.backends.k8s import capacity, names, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.workloads import Workload, selector_matches


@dataclass(frozen=True, slots=True)
class PodLine:
    namespace: str
    name: str
    deploy: str | None
    gpus: int
    phase: str
    ready: bool
    terminating: bool
    devices: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeLine:
    name: str
    flavor: str
    region: str
    capacity: int
    allocatable: int
    requested: int
    ready: bool
    pods: tuple[PodLine, ...] = ()

    @property
    def free(self) -> int:
        return self.allocatable - self.requested


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: tuple[NodeLine, ...]
    pending: tuple[PodLine, ...] = field(default_factory=tuple)
    """GPU pods of the scoped namespaces no node holds yet."""

    @property
    def gpus(self) -> int:
        return sum(n.capacity for n in self.nodes)


def _line(p: pods.Pod) -> PodLine:
    return PodLine(
        pods.namespace(p),
        pods.name(p),
        pods.labels(p).get(names.DEPLOY_ID),
        pods.gpus(p),
        str((p.get("status") or {}).get("phase", "")),
        pods.ready(p),
        pods.deleting(p),
        pods.devices(p),
    )


def cluster_inventory(
    kube: Kube,
    namespaces: Sequence[str] = (),
    *,
    nodes: list[Obj] | None = None,
    every_pod: list[Obj] | None = None,
) -> Inventory:
    """GPU nodes with what each holds, and the GPU pods still waiting for a node; ``nodes`` /
    ``every_pod`` given (the watch cache) are not listed again."""
    found = nodes if nodes is not None else kube.items(kube.core.list_node, what="list nodes")
    gpu_nodes = [
        n
        for n in found
        if pods.quantity(((n.get("status") or {}).get("capacity") or {}).get(names.GPU))
    ]
    everything = (
        every_pod
        if every_pod is not None
        else kube.items(kube.core.list_pod_for_all_namespaces, what="list pods")
    )
    held = pods.holding(everything)
    lines = []
    for n in sorted(gpu_nodes, key=capacity.node_name):
        name, labels = capacity.node_name(n), capacity.node_labels(n)
        mine = [p for p in held if pods.node(p) == name and pods.gpus(p)]
        lines.append(
            NodeLine(
                name,
                labels.get(names.GPU_PRODUCT, "?"),
                labels.get(names.REGION, "?"),
                pods.quantity(((n.get("status") or {}).get("capacity") or {}).get(names.GPU)),
                capacity.allocatable_gpus(n),
                sum(pods.gpus(p) for p in mine),
                capacity.node_usable(n),
                tuple(_line(p) for p in sorted(mine, key=pods.name)),
            )
        )
    waiting = [
        p
        for p in everything
        if not pods.node(p)
        and not pods.terminal(p)
        and pods.gpus(p)
        and (not namespaces or pods.namespace(p) in namespaces)
    ]
    return Inventory(tuple(lines), tuple(_line(p) for p in waiting))


def describe(kube: Kube, w: Workload) -> dict[str, Any]:
    """The deploy's conditions, Warning events and pods, for an operator."""
    ns_pods = kube.items(
        kube.core.list_namespaced_pod, w.namespace, what=f"list pods in {w.namespace}"
    )
    own = [p for p in ns_pods if selector_matches(w.selector, pods.labels(p))]
    involved = {w.name, *(pods.name(p) for p in own)}
    events = kube.items(
        kube.core.list_namespaced_event, w.namespace, what=f"list events in {w.namespace}"
    )
    warnings = [
        {
            "object": (e.get("involvedObject") or {}).get("name"),
            "reason": e.get("reason"),
            "message": e.get("message"),
            "count": e.get("count", 1),
        }
        for e in events
        if e.get("type") == "Warning"
        and (
            (e.get("involvedObject") or {}).get("name") in involved
            or str((e.get("involvedObject") or {}).get("name", "")).startswith(f"{w.name}-")
        )
    ]
    return {
        "deploy": w.deploy_id,
        "workload": w.ref,
        "replicas": w.replicas,
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in w.status.get("conditions") or []
        ],
        "warnings": warnings,
        "pods": [
            {
                **_pod_dict(p),
                "scheduling": pods.unschedulable_message(p) if pods.unschedulable(p) else "",
            }
            for p in own
        ],
    }


def _pod_dict(p: Obj) -> dict[str, Any]:
    line = _line(p)
    return {
        "name": line.name,
        "node": pods.node(p),
        "gpus": line.gpus,
        "phase": line.phase,
        "ready": line.ready,
        "terminating": line.terminating,
        "devices": list(line.devices),
    }
