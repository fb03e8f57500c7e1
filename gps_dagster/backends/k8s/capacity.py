"""Capacity preview per node (SPEC R-K8S-4, R-PASS-9): whole replica groups on free GPUs.

Free GPUs of a node = allocatable ``nvidia.com/gpu`` − the GPU requests of every pod bound to it
that is not terminal, **terminating pods included** (their GPUs are not back until they are gone).
A node counts only if the pod template may land there, as the scheduler would judge it: Ready and
schedulable, every ``nodeSelector`` label (flavor ``nvidia.com/gpu.product``, region, hostname …)
and the required node affinity matched, its NoSchedule/NoExecute taints tolerated. A replica
group of ``n`` nodes needs ``n`` distinct nodes of one flavor with ``gpus/n`` free GPUs each: an
8-GPU single-node replica never fits as 4 + 4 (``domain.fitting``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.pods import Pod
from gps_dagster.domain.fitting import groups_fitting
from gps_dagster.ports import CapacityPreview, Fits, Insufficient

Node = Mapping[str, Any]


def node_name(node: Node) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def node_labels(node: Node) -> Mapping[str, str]:
    labels = dict((node.get("metadata") or {}).get("labels") or {})
    labels.setdefault(names.HOSTNAME, node_name(node))
    return labels


def allocatable_gpus(node: Node) -> int:
    return pods.quantity(((node.get("status") or {}).get("allocatable") or {}).get(names.GPU))


def free_by_node(nodes: Iterable[Node], holding: Iterable[Pod]) -> dict[str, int]:
    """Allocatable GPUs minus the requests of pods holding them, per node (may be negative)."""
    used: dict[str, int] = {}
    for pod in holding:
        where = pods.node(pod)
        if where is not None:
            used[where] = used.get(where, 0) + pods.gpus(pod)
    return {node_name(n): allocatable_gpus(n) - used.get(node_name(n), 0) for n in nodes}


def node_usable(node: Node) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _expr_ok(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator"), list(expr.get("values") or [])
    have = labels.get(key)
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            return int(have) > int(values[0]) if op == "Gt" else int(have) < int(values[0])
        except ValueError:
            return False
    return False


def _affinity_ok(spec: Mapping[str, Any], node: Node) -> bool:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    labels, fields = node_labels(node), {"metadata.name": node_name(node)}
    return any(
        all(_expr_ok(e, labels) for e in t.get("matchExpressions") or [])
        and all(_expr_ok(e, fields) for e in t.get("matchFields") or [])
        for t in terms
    )


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (
            not tol.get("key") or tol.get("key") == taint.get("key")
        ):
            return True
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def matches(spec: Mapping[str, Any], node: Node) -> bool:
    """Whether a pod of this spec may be placed on the node (selectors, affinity, taints)."""
    labels = node_labels(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    if not _affinity_ok(spec, node):
        return False
    tolerations = spec.get("tolerations") or []
    blocking = [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
    ]
    return all(_tolerated(t, tolerations) for t in blocking)


def preview(
    spec: Mapping[str, Any],
    *,
    gpus_per_replica: int,
    nodes_per_replica: int,
    delta: int,
    nodes: Sequence[Node],
    holding: Sequence[Pod],
) -> CapacityPreview:
    """Do ``delta`` more replica groups of this pod spec fit, node by node, now?"""
    delta = max(delta, 0)
    matching = [n for n in nodes if matches(spec, n)]
    if not matching:
        return Insufficient("no_matching_flavor", {}, delta, 0)
    usable = [n for n in matching if node_usable(n)]
    free = free_by_node(usable, holding)
    per_node = gpus_per_replica // max(nodes_per_replica, 1)
    by_flavor: dict[str, list[int]] = {}
    for n in usable:
        slots = free[node_name(n)] // per_node if per_node else delta
        if slots > 0:
            by_flavor.setdefault(node_labels(n).get(names.GPU_PRODUCT, ""), []).append(slots)
    fitting = sum(groups_fitting(s, nodes_per_replica, delta) for s in by_flavor.values())
    if fitting >= delta:
        return Fits(groups=delta)
    shown = {k: v for k, v in sorted(free.items()) if v > 0}
    return Insufficient("insufficient_capacity", shown, delta, min(fitting, delta))
