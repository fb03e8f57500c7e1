"""A fake LeaderWorkerSet controller: pod groups for multi-node replicas, and their status.

The real LWS controller (sigs.k8s.io/lws) runs a leader StatefulSet and a worker StatefulSet per
group. This fake keeps only what the adapter reads: for each group ``i < spec.replicas`` the pods
``<name>-<i>`` (leader) and ``<name>-<i>-<j>`` (workers), labelled like LWS's, spread over
distinct nodes by a required pod anti-affinity the *real* scheduler enforces; groups beyond the
replicas are deleted (gracefully); the status reports ``replicas`` (complete groups),
``readyReplicas`` (groups whose pods are all Ready) and an ``Available`` condition carrying the
observed generation. ``CRD`` is the CustomResourceDefinition to install.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Collection
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.ports import CoreError, NotFound

_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{names.LWS_PLURAL}.{names.LWS_GROUP}"},
    "spec": {
        "group": names.LWS_GROUP,
        "scope": "Namespaced",
        "names": {
            "kind": "LeaderWorkerSet",
            "listKind": "LeaderWorkerSetList",
            "plural": names.LWS_PLURAL,
            "singular": "leaderworkerset",
            "shortNames": ["lws"],
        },
        "versions": [
            {
                "name": names.LWS_VERSION,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": _OPEN, "status": _OPEN},
                    }
                },
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.hpaPodSelector",
                    },
                },
            }
        ],
    },
}


def install_crd(kube: Kube) -> None:
    """Install the LWS CRD (an existing one is kept) and wait until it is served."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube.api_client)
    try:
        kube.call(
            ext.create_custom_resource_definition, CRD, what="create the LWS CRD", mutating=True
        )
    except CoreError as exc:
        if "already exists" not in str(exc):
            raise
    import time

    deadline = time.monotonic() + 30
    while not kube.has_lws():
        if time.monotonic() > deadline:
            raise TimeoutError("the LeaderWorkerSet CRD is not served after 30 s")
        time.sleep(0.1)


class LwsController:
    """``shape``: the status as LWS ``v0.8`` writes it (no ``observedGeneration`` anywhere: the
    oldest release the adapter supports, so the default) or as ``v0.9`` and later do
    (``status.observedGeneration`` and each condition stamped with it)."""

    def __init__(self, kube: Kube, namespaces: Collection[str], *, shape: str = "v0.8") -> None:
        self.kube, self.namespaces, self.shape = kube, sorted(namespaces), shape

    def sync(self) -> bool:
        changed = False
        for ns in self.namespaces:
            found = self.kube.items(
                self.kube.custom.list_namespaced_custom_object,
                names.LWS_GROUP,
                names.LWS_VERSION,
                ns,
                names.LWS_PLURAL,
                what="list leaderworkersets",
            )
            if not found:
                continue
            ns_pods = self.kube.items(
                self.kube.core.list_namespaced_pod,
                ns,
                label_selector=names.LWS_NAME,
                what="list lws pods",
            )
            for lws in found:
                changed |= self._reconcile(
                    lws,
                    [
                        p
                        for p in ns_pods
                        if pods.labels(p).get(names.LWS_NAME) == lws["metadata"]["name"]
                    ],
                )
        return changed

    def _reconcile(self, lws: Obj, own: list[Obj]) -> bool:
        meta, spec = lws["metadata"], lws.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return False
        replicas = int(spec.get("replicas", 1) or 0)
        size = int((spec.get("leaderWorkerTemplate") or {}).get("size") or 1)
        alive = {pods.name(p): p for p in own if not pods.terminal(p)}
        changed = False
        for group in range(replicas):
            for worker in range(size):
                name = _pod_name(meta["name"], group, worker)
                if name not in alive:
                    self._create(lws, group, worker, size)
                    changed = True
        for pod in alive.values():
            if int(
                pods.labels(pod).get(names.LWS_GROUP_INDEX, "0")
            ) >= replicas and not pods.deleting(pod):
                self._delete(pod)
                changed = True
        return self._status(lws, replicas, size, list(alive.values())) or changed

    def _create(self, lws: Obj, group: int, worker: int, size: int) -> None:
        meta, lwt = lws["metadata"], (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
        template = copy.deepcopy(
            (lwt.get("leaderTemplate") if worker == 0 else None) or lwt.get("workerTemplate") or {}
        )
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            names.LWS_NAME: meta["name"],
            names.LWS_GROUP_INDEX: str(group),
            names.LWS_WORKER_INDEX: str(worker),
        }
        spec: dict[str, Any] = template.get("spec") or {}
        if size > 1:
            term = {
                "labelSelector": {
                    "matchLabels": {names.LWS_NAME: meta["name"], names.LWS_GROUP_INDEX: str(group)}
                },
                "topologyKey": names.HOSTNAME,
            }
            spec.setdefault("affinity", {})["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [term]
            }
        owner = {
            "apiVersion": f"{names.LWS_GROUP}/{names.LWS_VERSION}",
            "kind": "LeaderWorkerSet",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": spec,
            "metadata": {
                "name": _pod_name(meta["name"], group, worker),
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": (template.get("metadata") or {}).get("annotations") or {},
                "ownerReferences": [owner],
            },
        }
        try:
            self.kube.call(
                self.kube.core.create_namespaced_pod,
                meta["namespace"],
                body,
                what="create lws pod",
                mutating=True,
            )
        except CoreError as exc:
            if "already exists" not in str(exc):
                raise

    def _delete(self, pod: Obj) -> None:
        with contextlib.suppress(NotFound):
            self.kube.call(
                self.kube.core.delete_namespaced_pod,
                pods.name(pod),
                pods.namespace(pod),
                what="delete lws pod",
                mutating=True,
            )

    def _status(self, lws: Obj, replicas: int, size: int, alive: list[Obj]) -> bool:
        groups: dict[int, list[Obj]] = {}
        for p in alive:
            if not pods.deleting(p):
                groups.setdefault(int(pods.labels(p).get(names.LWS_GROUP_INDEX, "0")), []).append(p)
        complete = [g for g in range(replicas) if len(groups.get(g, [])) == size]
        ready = [g for g in complete if all(pods.ready(p) for p in groups[g])]
        meta = lws["metadata"]
        available = "True" if replicas and len(ready) == replicas else "False"
        status: dict[str, Any] = {
            "replicas": len(complete),
            "readyReplicas": len(ready),
            "updatedReplicas": len(complete),
            "hpaPodSelector": f"{names.LWS_NAME}={meta['name']}",
            "conditions": [
                {
                    "type": "Available",
                    "status": available,
                    "reason": "GroupsReady",
                    "message": f"{len(ready)}/{replicas} groups ready",
                    "lastTransitionTime": "1970-01-01T00:00:00Z",
                }
            ],
        }
        if self.shape != "v0.8":
            generation = int(meta.get("generation") or 0)
            status["observedGeneration"] = generation
            status["conditions"][0]["observedGeneration"] = generation
        if (lws.get("status") or {}) == status:
            return False
        self.kube.call(
            self.kube.custom.patch_namespaced_custom_object_status,
            names.LWS_GROUP,
            names.LWS_VERSION,
            meta["namespace"],
            names.LWS_PLURAL,
            meta["name"],
            {"status": status},
            what="lws status",
            mutating=True,
            _content_type="application/merge-patch+json",
        )
        return True


def _pod_name(name: str, group: int, worker: int) -> str:
    return f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
