"""Track S rendering for the KAI scheduler (R-GPS-5) and the holder pod (R-GPS-6).

Names used, from KAI-Scheduler's public docs and sources:

* ``spec.schedulerName`` — taken from a ``SchedulingPolicy`` object, never a
  literal here (a cluster may run KAI under another name, or a test scheduler).
* label ``kai.scheduler/queue`` — the queue (KAI ≥ v0.6 renamed ``runai/queue``
  to it). The server derives it from the project; a tenant's own queue label
  (either spelling) is dropped and reported.
* annotation ``gpu-memory`` (MiB, as a string) — KAI's fractional GPU request
  by memory; fractional pods must not also request ``nvidia.com/gpu``.

The node is pinned with ``nodeSelector: {kubernetes.io/hostname: <node>}``,
*not* ``spec.nodeName``: ``nodeName`` bypasses the scheduler, and then KAI
would neither account the GPU share nor join the pod to the reservation's GPU
group. A tenant ``nodeName``, a contradicting hostname selector and any node
affinity are dropped and reported, so the pin cannot be widened.

Every function returns a fresh plain dict; the input is never mutated.
"""

# Decisions embodied here (docs/decisions.md):
# * “Node pinning with `nodeSelector: kubernetes.io/hostname`, not `nodeName`”
# * “An idle exclusive reservation is held by a pod; its deploy's start hands it over (R-GPS-2)”

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.gps.vllm import render_vllm_args
from gps_dagster.domain.models import Frozen

QUEUE_LABEL = "kai.scheduler/queue"
LEGACY_QUEUE_LABEL = "runai/queue"
GPU_MEMORY_ANNOTATION = "gpu-memory"
GPU_FRACTION_ANNOTATION = "gpu-fraction"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
"""A fractional pod requests no ``nvidia.com/gpu``, so the ExtendedResourceToleration admission
plugin gives it no toleration for the GPU taint (GKE taints GPU nodes ``nvidia.com/gpu``): the
render adds it, since the pod is pinned to the reservation's GPU node anyway."""
RESERVATION_LABEL = "gps-dagster.io/reservation"
DEPLOY_LABEL = "gps-dagster.io/deploy"
ROLE_LABEL = "gps-dagster.io/role"
HOLDER_MEMORY_MIB = 1
"""The holder's VRAM share: the smallest non-zero request. It is not admitted
against the budget; the reservation's headroom (5 % of an H200 ≈ 7 GiB)
absorbs it, and the pause container allocates nothing on the GPU."""
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


class SchedulingPolicy(Frozen):
    """Cluster-side scheduling choices the renderer must not hard-code."""

    scheduler_name: str = Field(min_length=1, description="e.g. ``kai-scheduler``.")
    queue_template: str = Field(
        default="cmp-{project}", description="Queue name from the project, e.g. ``cmp-{project}``."
    )
    holder_image: str = PAUSE_IMAGE
    priority_class_name: str | None = None

    def queue_for(self, project: str) -> str:
        return self.queue_template.format(project=project)


@dataclass(frozen=True, slots=True)
class Dropped:
    """A tenant-supplied field the server removed or overrode, reported back to the tenant."""

    path: str
    value: Any
    reason: str


@dataclass(frozen=True, slots=True)
class Rendered:
    manifest: dict[str, Any]
    dropped: tuple[Dropped, ...]


def render_member_pod(
    tenant_pod: Mapping[str, Any],
    *,
    reservation: Reservation,
    deploy_id: str,
    project: str,
    memory_mib: int,
    policy: SchedulingPolicy,
    vllm_container: str | None = None,
) -> Rendered:
    """A time-sliced member's Pod: pinned, queued and sized by the server, not the tenant.

    With ``vllm_container``, that container's args get the derived
    ``--gpu-memory-utilization`` (R-GPS-4); a contradicting tenant value is
    ``SpecInvalid`` at ``spec.containers[i].args[j]``.
    """
    pod, dropped = sanitise(
        tenant_pod, reservation=reservation, deploy_id=deploy_id, project=project, policy=policy
    )
    pod["metadata"].setdefault("annotations", {})[GPU_MEMORY_ANNOTATION] = str(memory_mib)
    if vllm_container is not None:
        _vllm_args(pod["spec"], vllm_container, memory_mib, reservation.gpu_memory_mib)
    return Rendered(pod, dropped)


def _vllm_args(spec: dict[str, Any], name: str, memory_mib: int, gpu_memory_mib: int) -> None:
    containers = spec.get("containers") or []
    for i, container in enumerate(containers):
        if container.get("name") == name:
            args = list(container.get("args") or [])
            path = f"spec.containers[{i}].args"
            container["args"] = list(render_vllm_args(args, memory_mib, gpu_memory_mib, path=path))
            return
    raise SpecInvalid(
        [
            FieldError(
                "spec.containers",
                "unknown_container",
                f"add a container named '{name}' or fix vllm_container",
            )
        ]
    )


def sanitise(
    tenant_pod: Mapping[str, Any],
    *,
    reservation: Reservation,
    deploy_id: str,
    project: str,
    policy: SchedulingPolicy,
) -> tuple[dict[str, Any], tuple[Dropped, ...]]:
    """The tenant pod with every placement decision taken back by the server (shared by tracks S and
    H).

    Namespace, queue, scheduler and node come from the reservation and the
    policy; tenant GPU requests (``nvidia.com/gpu``, ``gpu-fraction``,
    ``gpu-memory``) are removed because the GPU share is the binding's.
    """
    pod: dict[str, Any] = copy.deepcopy(dict(tenant_pod))
    dropped: list[Dropped] = []
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    _override(
        meta,
        "namespace",
        reservation.namespace,
        "metadata.namespace",
        "namespace_is_the_reservation's",
        dropped,
    )
    labels = meta.setdefault("labels", {})
    for key in (QUEUE_LABEL, LEGACY_QUEUE_LABEL):
        if key in labels:
            dropped.append(
                Dropped(f"metadata.labels[{key}]", labels.pop(key), "queue_is_server_derived")
            )
    labels.update(
        {
            QUEUE_LABEL: policy.queue_for(project),
            RESERVATION_LABEL: reservation.id,
            DEPLOY_LABEL: deploy_id,
            ROLE_LABEL: "member",
        }
    )
    annotations = meta.get("annotations") or {}
    for key in (GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION):
        if key in annotations:
            dropped.append(
                Dropped(
                    f"metadata.annotations[{key}]", annotations.pop(key), "gpu_share_is_memory_mib"
                )
            )
    if "annotations" in meta and not annotations:
        meta.pop("annotations")
    _schedule(spec, reservation, policy, dropped)
    _strip_gpu_resources(spec, dropped)
    return pod, tuple(dropped)


def render_holder_pod(
    reservation: Reservation, *, project: str, policy: SchedulingPolicy
) -> dict[str, Any]:
    """The minimal fractional pod that keeps the reservation's KAI GPU group alive across a swap."""
    return _holder_pod(
        reservation,
        project,
        policy,
        requests={"cpu": "10m", "memory": "16Mi"},
        limits={"memory": "16Mi"},
        container_security={},
        annotations={GPU_MEMORY_ANNOTATION: str(HOLDER_MEMORY_MIB)},
    )


def render_exclusive_holder_pod(
    reservation: Reservation, *, project: str, policy: SchedulingPolicy
) -> dict[str, Any]:
    """The pod that holds an exclusive reservation's GPUs while no bound deploy runs (R-GPS-2).

    It requests every reserved GPU whole (``nvidia.com/gpu``), pinned to the reservation's node,
    so the schedulers (the default one and KAI both count every pod bound to a node) and the
    kubelet's device manager account for them: an outside workload sees them taken. It is the
    cluster-autoscaler's "placeholder pod" idea (a pause pod that reserves capacity) without its
    preemption: a bound deploy's start deletes it (``Reservations.hand_over``). Labelled
    ``role=holder`` and carrying no deploy label, it is never read as a workload's pod. Which of
    the node's GPUs the device plugin gives it is the plugin's choice; the witness of the bound
    deploy's pods (R-GPS-7) is what checks the UUIDs.
    """
    gpus = str(len(reservation.gpu_uuids))
    return _holder_pod(
        reservation,
        project,
        policy,
        requests={"cpu": "10m", "memory": "16Mi", GPU_RESOURCE: gpus},
        limits={"memory": "16Mi", GPU_RESOURCE: gpus},
        container_security={"readOnlyRootFilesystem": True},
        annotations=None,
    )


def _holder_pod(
    reservation: Reservation,
    project: str,
    policy: SchedulingPolicy,
    *,
    requests: dict[str, str],
    limits: dict[str, str],
    container_security: dict[str, Any],
    annotations: dict[str, str] | None,
) -> dict[str, Any]:
    """A holder pod of either kind: Pod Security "restricted", no token, grace 0, the policy's
    scheduling, labelled ``role=holder`` and never with a deploy label."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "holder",
                "image": policy.holder_image,
                "resources": {"requests": requests, "limits": limits},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsNonRoot": True,
                    "runAsUser": 65535,
                    "capabilities": {"drop": ["ALL"]},
                    **container_security,
                },
            }
        ],
        # Pod Security "restricted" (tests/helm/test_pod_security.py); it never calls the API.
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
    }
    _schedule(spec, reservation, policy, [])
    metadata: dict[str, Any] = {
        "name": holder_name(reservation.id),
        "namespace": reservation.namespace,
        "labels": {
            QUEUE_LABEL: policy.queue_for(project),
            RESERVATION_LABEL: reservation.id,
            ROLE_LABEL: "holder",
        },
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def holder_name(reservation_id: str) -> str:
    """``<reservation>-holder``, cut to the 63 characters of a DNS label."""
    return f"{reservation_id[: 63 - len('-holder')]}-holder"


def _schedule(
    spec: dict[str, Any], rsv: Reservation, policy: SchedulingPolicy, dropped: list[Dropped]
) -> None:
    _override(
        spec,
        "schedulerName",
        policy.scheduler_name,
        "spec.schedulerName",
        "scheduler_is_server_derived",
        dropped,
    )
    if "nodeName" in spec:
        dropped.append(Dropped("spec.nodeName", spec.pop("nodeName"), "node_is_the_reservation's"))
    affinity = spec.get("affinity")
    if isinstance(affinity, dict) and "nodeAffinity" in affinity:
        dropped.append(
            Dropped(
                "spec.affinity.nodeAffinity",
                affinity.pop("nodeAffinity"),
                "node_is_the_reservation's",
            )
        )
        if not affinity:
            spec.pop("affinity")
    selector = spec.setdefault("nodeSelector", {})
    _override(
        selector,
        HOSTNAME_LABEL,
        rsv.node,
        f"spec.nodeSelector[{HOSTNAME_LABEL}]",
        "node_is_the_reservation's",
        dropped,
    )
    tolerations = spec.setdefault("tolerations", [])
    if GPU_TOLERATION not in tolerations:
        tolerations.append(dict(GPU_TOLERATION))
    if policy.priority_class_name:
        spec["priorityClassName"] = policy.priority_class_name


def _strip_gpu_resources(spec: dict[str, Any], dropped: list[Dropped]) -> None:
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(kind) or []):
            resources = container.get("resources") or {}
            for section in ("limits", "requests"):
                values = resources.get(section) or {}
                if GPU_RESOURCE in values:
                    dropped.append(
                        Dropped(
                            f"spec.{kind}[{i}].resources.{section}[{GPU_RESOURCE}]",
                            values.pop(GPU_RESOURCE),
                            "gpu_share_is_memory_mib",
                        )
                    )
                    if not values:  # as the API server returns it: an empty map is omitted
                        resources.pop(section, None)


def _override(
    target: dict[str, Any], key: str, value: Any, path: str, reason: str, dropped: list[Dropped]
) -> None:
    if key in target and target[key] != value:
        dropped.append(Dropped(path, target[key], reason))
    target[key] = value
