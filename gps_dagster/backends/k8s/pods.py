"""What the adapter reads from a pod: its GPUs, whether it holds them, whether it is placed.

A pod holds its GPUs from the moment it is bound to a node until it is gone: a *terminating*
pod (``deletionTimestamp`` set, grace period running) still holds them (SPEC R-K8S-3/4); only a
terminal pod (``Succeeded``/``Failed``) does not.
"""

# Decisions embodied here (docs/decisions.md):
# * “The fake nodes publish the witness through the node agent's own write path”

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.ports import Permanent

Pod = Mapping[str, Any]
Requests = dict[str, Fraction]
"""Resource name → amount (cpu in cores, memory in bytes, the rest in units)."""

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_SUFFIX = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(value: Any, *, where: str = "quantity") -> Fraction:
    """A Kubernetes resource quantity (``"500m"``, ``"64Gi"``, ``"1e3"``, ``8``) exactly.

    Anything else is the port's ``Permanent(invalid_quantity)`` naming ``where``, never a
    ValueError out of the adapter (R-PASS-15)."""
    if value is None:
        return Fraction(0)
    if isinstance(value, bool):
        raise Permanent(f"{where}: {value!r} is not a quantity", reason="invalid_quantity")
    if isinstance(value, int | float) and math.isfinite(value):
        return Fraction(value)
    found = _QUANTITY.match(str(value).strip())
    if found is None:
        raise Permanent(
            f"{where}: {value!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)",
            reason="invalid_quantity",
        )
    number, exponent, suffix = found.groups()
    scale = (
        Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIX.get(suffix or "", Fraction(1))
    )
    return Fraction(number) * scale


def quantity(value: Any, *, where: str = "quantity") -> int:
    """A whole-number quantity (extended resources are integers; ``"8"`` or ``8``), rounded up."""
    return math.ceil(parse_quantity(value, where=where))


def container_requests(container: Mapping[str, Any], where: str) -> Requests:
    """What a container requests; a resource with only a limit requests its limit (the API
    server's defaulting does the same before the scheduler sees the pod)."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    out: Requests = {}
    for key in {*requests, *limits}:
        raw = requests.get(key, limits.get(key))
        out[str(key)] = parse_quantity(raw, where=f"{where}.resources[{key}]")
    return out


def _add(a: Requests, b: Mapping[str, Fraction]) -> Requests:
    return {k: a.get(k, Fraction(0)) + b.get(k, Fraction(0)) for k in {*a, *b}}


def _max(a: Requests, b: Mapping[str, Fraction]) -> Requests:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in {*a, *b}}


def spec_requests(spec: Mapping[str, Any]) -> Requests:
    """The pod's effective request as the scheduler computes it: the containers' sum plus the
    sidecars' (``initContainers[].restartPolicy: Always``, which keep running), or, if larger,
    each ordinary init container with the sidecars started before it (Kubernetes
    ``pkg/api/v1/resource/helpers.go`` ``PodRequests``; sidecars per KEP-753)."""
    main: Requests = {}
    for i, c in enumerate(spec.get("containers") or []):
        main = _add(main, container_requests(c, f"containers[{i}]"))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        need = container_requests(c, f"initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, need)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, need))
    overhead = {
        str(k): parse_quantity(v, where=f"overhead[{k}]")
        for k, v in (spec.get("overhead") or {}).items()
    }
    return _add(_max(_add(main, sidecars), init_peak), overhead)


def spec_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs a pod spec requests (containers + sidecars, or the largest init phase if bigger)."""
    return math.ceil(spec_requests(spec).get(names.GPU, Fraction(0)))


def container_gpus(container: Mapping[str, Any]) -> int:
    return math.ceil(container_requests(container, "container").get(names.GPU, Fraction(0)))


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
    """GPU UUIDs the node agent published on the pod (the kubelet's PodResources record),
    container by container; () until the agent has seen the pod."""
    spec, notes = pod.get("spec") or {}, annotations_of(pod)
    out: list[str] = []
    for container in spec.get("containers") or []:
        value = notes.get(names.agent_device_annotation(str(container.get("name", ""))), "")
        out.extend(u.strip() for u in value.split(",") if u.strip())
    return tuple(dict.fromkeys(out))


def holding(pods: Iterable[Pod]) -> list[Pod]:
    """Pods that hold their node's GPUs now: bound and not terminal (terminating included)."""
    return [p for p in pods if node(p) and not terminal(p)]
