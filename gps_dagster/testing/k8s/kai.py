"""A stand-in for the KAI scheduler's binder, for reservation-bound pods only.

Pods rendered by Track S (``domain.render.kai``) name the KAI scheduler, so the default scheduler
leaves them alone. This fake binds them the way the product relies on KAI to: onto the node the
render pinned (``kubernetes.io/hostname``), inside their reservation — whole GPUs of an exclusive
reservation, or the shared GPU of a time-sliced one (a fractional pod, ``gpu-memory``). A pod
that does not fit gets ``PodScheduled=False reason=Unschedulable``, as any scheduler reports it.
The device UUIDs are then written by ``nodesim`` (the device plugin's part).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.domain.render import kai
from gps_dagster.ports import NotFound
from gps_dagster.testing.k8s.nodesim import NodeSimulator

STRATEGIC = "application/strategic-merge-patch+json"


class KaiBinder:
    def __init__(
        self, kube: Kube, sim: NodeSimulator, *, scheduler_name: str, namespaces: Collection[str]
    ) -> None:
        self.kube, self.sim, self.scheduler_name = kube, sim, scheduler_name
        self.namespaces = set(namespaces)
        self._promised: dict[str, int] = {}

    def sync(self) -> bool:
        """Bind every pending pod of ours that fits; mark the others unschedulable."""
        changed = False
        self._promised = {}
        for pod in self._pending():
            node, reason = self._choose(pod)
            if node is not None:
                self._bind(pod, node)
                self._promised[node] = self._promised.get(node, 0) + pods.gpus(pod)
                changed = True
            elif self._mark_unschedulable(pod, reason):
                changed = True
        return changed

    def _pending(self) -> list[Obj]:
        found = self.kube.items(
            self.kube.core.list_pod_for_all_namespaces,
            field_selector=f"spec.schedulerName={self.scheduler_name},spec.nodeName=",
            what="list KAI pods",
        )
        return [
            p
            for p in found
            if pods.namespace(p) in self.namespaces
            and not pods.deleting(p)
            and not pods.terminal(p)
        ]

    def _candidates(self, spec: Mapping[str, Any]) -> list[str]:
        pinned = (spec.get("nodeSelector") or {}).get(names.HOSTNAME)
        if pinned:
            return [pinned]
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        return [
            v
            for t in terms
            for e in t.get("matchExpressions") or []
            if e.get("key") == names.HOSTNAME
            for v in e.get("values") or []
        ]

    def _choose(self, pod: Obj) -> tuple[str | None, str]:
        rsvs = self.sim._rsv_ids(pod)
        if not rsvs:
            return None, "the pod names no known reservation"
        need = pods.gpus(pod)
        for node in self._candidates(pod.get("spec") or {}):
            if node not in self.sim.nodes:
                continue
            if need == 0:
                if any(self.sim.reservations[r].node == node for r in rsvs):
                    return node, ""
                continue
            on_node = [r for r in rsvs if self.sim.reservations[r].node == node]
            free = len(self.sim.free_uuids(node, reserved_for=on_node)) - self._promised.get(
                node, 0
            )
            if on_node and free >= need:
                return node, ""
        return (
            None,
            f"0/{len(self.sim.nodes)} nodes: reservation {','.join(rsvs)} has fewer than "
            f"{need} free GPUs",
        )

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.kube.call(
                self.kube.core.create_namespaced_pod_binding,
                meta["name"],
                meta["namespace"],
                body,
                what=f"bind {meta['name']}",
                mutating=True,
            )
        except NotFound:
            return

    def _mark_unschedulable(self, pod: Obj, reason: str) -> bool:
        message = f"kai (fake): {reason}"
        cond = pods.condition(pod, "PodScheduled") or {}
        if cond.get("status") == "False" and cond.get("message") == message:
            return False
        status = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": self.sim._iso(),
                }
            ]
        }
        try:
            self.kube.call(
                self.kube.core.patch_namespaced_pod_status,
                pods.name(pod),
                pods.namespace(pod),
                {"status": status},
                what="mark unschedulable",
                mutating=True,
                _content_type=STRATEGIC,
            )
        except NotFound:
            return False
        return True


__all__ = ["KaiBinder", "kai"]
