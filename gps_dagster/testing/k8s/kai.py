"""A stand-in for the KAI scheduler's binder, for reservation-bound pods only.

Pods rendered by Track S (``domain.render.kai``) name the KAI scheduler, so the default scheduler
leaves them alone. This fake binds them the way the product relies on KAI to: onto the node the
render pinned (``kubernetes.io/hostname``), inside their reservation — whole GPUs of an exclusive
reservation, or the shared GPU of a time-sliced one (a fractional pod, ``gpu-memory``). A pod
that does not fit gets ``PodScheduled=False reason=Unschedulable``, as any scheduler reports it.
The device UUIDs are then chosen by ``nodesim`` (the device plugin's part).

A time-sliced member shares a GPU the way KAI's GPU sharing does it (KAI-Scheduler
docs/gpu-sharing: "In order to reserve a GPU device, KAI Scheduler will run a reservation pod in
``kai-resource-reservation`` namespace"): before the first shared pod of a GPU group binds, a
reservation pod requesting that GPU whole is created on the node, both carry the group label
``runai-gpu-group``, and the reservation pod goes once no shared pod of its group is left (what
the product's holder pod prevents, R-GPS-6). The shared pod itself requests no ``nvidia.com/gpu``,
so the kubelet's PodResources record lists only the reservation pod's device — which is what the
node agent maps back to the group's pods.
"""

# Decisions embodied here (docs/decisions.md):
# * “Reserved GPUs are not `nvidia.com/gpu` on the test cluster”
# * “A time-sliced member's GPU is its KAI reservation pod's”

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Collection, Mapping
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.nodeagent import KAI_GPU_GROUP
from gps_dagster.domain.render import kai
from gps_dagster.ports import CoreError, NotFound
from gps_dagster.testing.k8s.nodesim import MISPLACED, NodeSimulator

STRATEGIC = "application/strategic-merge-patch+json"
RESERVATION_NAMESPACE = "kai-resource-reservation"
"""KAI's namespace of reservation pods (KAI-Scheduler ``DefaultResourceReservationName``)."""


class KaiBinder:
    def __init__(
        self,
        kube: Kube,
        sim: NodeSimulator | LedgerNodes,
        *,
        scheduler_name: str,
        namespaces: Collection[str],
        reservation_image: str = kai.PAUSE_IMAGE,
        tolerations: tuple[Mapping[str, Any], ...] = (),
    ) -> None:
        """``sim``: the fake nodes, or (for the real node, whose kubelet and device plugin choose
        the devices) ``LedgerNodes``. ``reservation_image`` / ``tolerations``: what the
        reservation pods run and tolerate (the real node has only its local pause image and a
        taint of its own)."""
        self.kube, self.sim, self.scheduler_name = kube, sim, scheduler_name
        self.namespaces = set(namespaces)
        self.reservation_image, self.tolerations = reservation_image, tuple(tolerations)
        self._promised: dict[str, int] = {}

    def sync(self) -> bool:
        """Bind every pending pod of ours that fits; mark the others unschedulable."""
        changed = self._collect_reservation_pods()
        self._promised = {}
        for pod in self._pending():
            node, reason = self._choose(pod)
            if node is not None:
                if not self._share(pod, node):
                    continue  # its reservation pod is not there yet: bind on a later sync
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

    # -- GPU sharing: the reservation pod of a group -----------------------------------------------

    def _share(self, pod: Obj, node: str) -> bool:
        """For a shared (fractional) pod: its group's reservation pod exists and the pod carries
        the group label; then it is bound. False when the reservation pod could not be made yet."""
        meta = pod["metadata"]
        fractional = pods.gpus(pod) == 0 and kai.GPU_MEMORY_ANNOTATION in (
            meta.get("annotations") or {}
        )
        if fractional:
            rid = next(r for r in self.sim._rsv_ids(pod) if self.sim.reservations[r].node == node)
            group = gpu_group(node, rid)
            deploy = (meta.get("labels") or {}).get(names.DEPLOY_ID)
            if not self._reservation_pod(node, rid, group, misplaced=deploy in self.sim.misplace):
                return False
            with contextlib.suppress(NotFound):
                self.kube.call(
                    self.kube.core.patch_namespaced_pod,
                    meta["name"],
                    meta["namespace"],
                    {"metadata": {"labels": {KAI_GPU_GROUP: group}}},
                    what=f"label {meta['name']} with its GPU group",
                    mutating=True,
                    _content_type=STRATEGIC,
                )
        self._bind(pod, node)
        return True

    def _reservation_pod(self, node: str, rid: str, group: str, *, misplaced: bool) -> bool:
        name = f"gpu-reservation-{group}"
        with contextlib.suppress(NotFound):
            self.kube.call(
                self.kube.core.read_namespaced_pod,
                name,
                RESERVATION_NAMESPACE,
                what="read reservation pod",
            )
            return True
        self._ensure_namespace()
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {
                    KAI_GPU_GROUP: group,
                    kai.RESERVATION_LABEL: rid,
                    "app": "kai-resource-reservation",
                },
                "annotations": {MISPLACED: "true"} if misplaced else {},
            },
            "spec": {
                "nodeName": node,
                "schedulerName": self.scheduler_name,
                "automountServiceAccountToken": False,
                "tolerations": [dict(kai.GPU_TOLERATION), *(dict(t) for t in self.tolerations)],
                "containers": [
                    {
                        "name": "reservation",
                        "image": self.reservation_image,
                        "resources": {"limits": {names.GPU: "1"}, "requests": {names.GPU: "1"}},
                    }
                ],
            },
        }
        try:
            self.kube.call(
                self.kube.core.create_namespaced_pod,
                RESERVATION_NAMESPACE,
                body,
                what="create a reservation pod",
                mutating=True,
            )
        except CoreError as exc:
            # 1.20 refuses pods until the namespace's default ServiceAccount exists: retry later
            return "already exists" in str(exc)
        return True

    def _ensure_namespace(self) -> None:
        try:
            self.kube.call(
                self.kube.core.create_namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": RESERVATION_NAMESPACE},
                },
                what="create the reservation namespace",
                mutating=True,
            )
        except CoreError as exc:
            if "already exists" not in str(exc):
                raise

    def _collect_reservation_pods(self) -> bool:
        """KAI deletes a reservation pod once no shared pod of its group is left."""
        found = self.kube.items(
            self.kube.core.list_pod_for_all_namespaces,
            label_selector=KAI_GPU_GROUP,
            what="list GPU-group pods",
        )
        ours = [
            p
            for p in found
            if pods.namespace(p) == RESERVATION_NAMESPACE and pods.node(p) in self.sim.nodes
        ]
        alive = {
            pods.labels(p).get(KAI_GPU_GROUP)
            for p in found
            if pods.namespace(p) != RESERVATION_NAMESPACE and not pods.terminal(p)
        }
        changed = False
        for p in ours:
            if pods.labels(p).get(KAI_GPU_GROUP) in alive or pods.deleting(p):
                continue
            with contextlib.suppress(NotFound):
                self.kube.call(
                    self.kube.core.delete_namespaced_pod,
                    pods.name(p),
                    RESERVATION_NAMESPACE,
                    grace_period_seconds=0,
                    what="delete an unused reservation pod",
                    mutating=True,
                )
                changed = True
        return changed

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


class LedgerNodes:
    """What ``KaiBinder`` reads of the fake nodes, for a real node: its name and the ledger's
    reservations on it. The real kubelet's device plugin picks the devices, so only fractional
    (time-sliced) pods and the reservation pods of their groups are served (an exclusive pod
    would need the node's free UUIDs: it is refused as not fitting)."""

    def __init__(self, nodes: Collection[str], reservations: Mapping[str, Any], clock: Any) -> None:
        self.nodes = {n: None for n in nodes}
        self.reservations = dict(reservations)
        self.misplace: set[str] = set()
        self.clock = clock

    def _rsv_ids(self, pod: Obj) -> list[str]:
        meta = pod["metadata"]
        ids = [(meta.get("labels") or {}).get(kai.RESERVATION_LABEL, "")]
        return [r for r in ids if r in self.reservations]

    def free_uuids(self, node: str, reserved_for: Any = None) -> list[str]:
        return []

    def _iso(self) -> str:
        return str(self.clock.now().isoformat())


def gpu_group(node: str, reservation_id: str) -> str:
    """The GPU group of a time-sliced reservation (KAI names groups by a UUID; ours is stable)."""
    return hashlib.sha1(f"{node}/{reservation_id}".encode()).hexdigest()[:20]


__all__ = ["KaiBinder", "LedgerNodes", "gpu_group", "kai"]
