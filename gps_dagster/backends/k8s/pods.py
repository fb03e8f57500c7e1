"""What the adapter reads from a pod: its GPUs, whether it holds them, whether it is placed.

A pod holds its GPUs from the moment it is bound to a node until it is gone: a *terminating*
pod (``deletionTimestamp`` set, grace period running) still holds them (SPEC R-K8S-3/4); only a
terminal pod (``Succeeded``/``Failed``) does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gps_dagster.backends.k8s import names

Pod = Mapping[str, Any]


def quantity(value: Any) -> int:
    """A whole-number quantity (extended resources are integers; ``"8"`` or ``8``)."""
    if value is None:
        return 0
    text = str(value)
    return int(float(text[:-1]) * 1000) if text.endswith("k") else int(float(text))


def container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    return quantity(requests.get(names.GPU, limits.get(names.GPU)))


def spec_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs a pod spec requests: the containers' sum, or the largest init container if bigger."""
    main = sum(container_gpus(c) for c in spec.get("containers") or [])
    init = max((container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def gpus(pod: Pod) -> int:
    return spec_gpus(pod.get("spec") or {})


def terminal(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def deleting(pod: Pod) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def node(pod: Pod) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def labels(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def annotations_of(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def namespace(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("namespace", ""))


def condition(pod: Pod, kind: str) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def ready(pod: Pod) -> bool:
    cond = condition(pod, "Ready")
    return bool(cond and cond.get("status") == "True") and not deleting(pod) and not terminal(pod)


def unschedulable(pod: Pod) -> bool:
    """Pending with ``PodScheduled=False reason=Unschedulable`` (the scheduler's verdict)."""
    if node(pod) or terminal(pod) or deleting(pod):
        return False
    cond = condition(pod, "PodScheduled")
    return bool(cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable")


def unschedulable_message(pod: Pod) -> str:
    cond = condition(pod, "PodScheduled") or {}
    return str(cond.get("message") or "")


def devices(pod: Pod) -> tuple[str, ...]:
    """GPU UUIDs the device plugin / binder annotated on the pod, container by container."""
    spec, notes = pod.get("spec") or {}, annotations_of(pod)
    out: list[str] = []
    for container in spec.get("containers") or []:
        value = notes.get(names.device_annotation(str(container.get("name", ""))), "")
        out.extend(u.strip() for u in value.split(",") if u.strip())
    return tuple(dict.fromkeys(out))


def holding(pods: Iterable[Pod]) -> list[Pod]:
    """Pods that hold their node's GPUs now: bound and not terminal (terminating included)."""
    return [p for p in pods if node(p) and not terminal(p)]
