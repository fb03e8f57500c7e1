"""Capacity preview per node (SPEC R-K8S-4, R-PASS-9): whole replica groups, as the scheduler
would place them, now.

Free on a node = allocatable − the requests of every pod bound to it that is not terminal
(**terminating pods included**: their resources are not back until they are gone) − the requests
of pods the scheduler has *nominated* for it (a preemptor waiting for its victims). Every resource
a pod requests is modelled: ``cpu``, ``memory``, the ``pods`` slot, ``nvidia.com/gpu``, MIG
profiles (``nvidia.com/mig-…``) and any other extended resource; requests are the scheduler's
(``pods.spec_requests``: sidecars add, init containers peak).

A node counts only if the pod may land there: Ready and schedulable, every ``nodeSelector`` label
and the required node affinity matched (an empty ``nodeSelectorTerm`` matches nothing), its
NoSchedule/NoExecute taints tolerated — counting the tolerations the **ExtendedResourceToleration**
admission plugin adds to every pod that requests an extended resource (GKE taints GPU nodes
``nvidia.com/gpu=present:NoSchedule`` and relies on it; the plugin changes pods, never the
template, so the preview adds them itself: ``plugin/pkg/admission/extendedresourcetoleration``).
Required pod anti-affinity and ``DoNotSchedule`` topology spread on ``kubernetes.io/hostname`` are
simulated pod by pod; anything the preview does not model (pod affinity, other topology keys) is
``Insufficient("preview_unsupported", …)`` naming the feature, never a Fits it cannot vouch for.

A replica group (an LWS: its leader pod, then ``size − 1`` workers, each with its own template's
requests) needs distinct nodes of one flavor; an 8-GPU single-node replica never fits as 4 + 4.
"""
# Decisions embodied here (docs/decisions.md):
# * “The capacity preview simulates the scheduler pod by pod”
# * “Pending pods ahead in the scheduler's queue take freed capacity first (R-PASS-9)”
# * “A preview parses each pod's requests once per resourceVersion”
# * “A preview block keeps one placement per kind of preview”

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.pods import Pod, Requests
from gps_dagster.backends.k8s.workloads import selector_matches
from gps_dagster.ports import CapacityPreview, Fits, Insufficient

PODS = "pods"

Node = Mapping[str, Any]
RequestsOf = Callable[[Pod], Requests]
"""A pod's effective requests; the watch cache's ``requests_of`` parses each pod version once."""


def parse_requests(pod: Pod) -> Requests:
    """``pods.spec_requests`` of the pod, parsed now (a pod not from the cache)."""
    return pods.spec_requests(pod.get("spec") or {})


def node_name(node: Node) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def node_labels(node: Node) -> Mapping[str, str]:
    labels = dict((node.get("metadata") or {}).get("labels") or {})
    labels.setdefault(names.HOSTNAME, node_name(node))
    return labels


def allocatable_gpus(node: Node) -> int:
    return pods.quantity(((node.get("status") or {}).get("allocatable") or {}).get(names.GPU))


def free_by_node(
    nodes: Iterable[Node], holding: Iterable[Pod], requests_of: RequestsOf | None = None
) -> dict[str, int]:
    """Allocatable GPUs minus the requests of pods holding them, per node (may be negative)."""
    used: dict[str, int] = {}
    for pod in holding:
        where = pods.node(pod)
        if where is not None:
            gpus = (
                math.ceil(requests_of(pod).get(names.GPU, Fraction(0)))
                if requests_of is not None
                else pods.gpus(pod)
            )
            used[where] = used.get(where, 0) + gpus
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
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    labels, fields = node_labels(node), {"metadata.name": node_name(node)}
    return any(
        bool(t.get("matchExpressions") or t.get("matchFields"))  # an empty term matches nothing
        and all(_expr_ok(e, labels) for e in t.get("matchExpressions") or [])
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


def extended(resource: str) -> bool:
    """An extended resource name (``vendor.example/x``, not ``*kubernetes.io/*`` nor
    ``requests.*``): Kubernetes ``helper.IsExtendedResourceName``."""
    return (
        "/" in resource
        and "kubernetes.io/" not in resource
        and not resource.startswith("requests.")
    )


def admitted_tolerations(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's tolerations after ExtendedResourceToleration: one ``Exists``/``NoSchedule`` per
    extended resource its containers or init containers request."""
    added = sorted(r for r in pods.spec_requests(spec) if extended(r))
    return [
        *(spec.get("tolerations") or []),
        *({"key": r, "operator": "Exists", "effect": "NoSchedule"} for r in added),
    ]


def matches(
    spec: Mapping[str, Any],
    node: Node,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
) -> bool:
    """Whether a pod of this spec may be placed on the node (selectors, affinity, taints).
    ``tolerations``: the spec's ``admitted_tolerations``, when the caller has them already
    (a placement asks of every node: the spec's requests are then parsed once, not per node)."""
    labels = node_labels(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    if not _affinity_ok(spec, node):
        return False
    if tolerations is None:
        tolerations = admitted_tolerations(spec)
    blocking = [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
    ]
    return all(_tolerated(t, tolerations) for t in blocking)


def node_allocatable(node: Node) -> Requests:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {
        str(k): pods.parse_quantity(v, where=f"node {node_name(node)} allocatable[{k}]")
        for k, v in raw.items()
    }


def unsupported(spec: Mapping[str, Any]) -> str | None:
    """The first placement rule of this pod spec the preview does not model, if any."""
    affinity = spec.get("affinity") or {}
    if (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        return "pod_affinity"
    for term in _anti_terms(spec):
        if term.get("topologyKey") != names.HOSTNAME:
            return "pod_anti_affinity_topology"
        if term.get("namespaceSelector") is not None:
            return "pod_anti_affinity_namespace_selector"
    for c in _spread(spec):
        if c.get("topologyKey") != names.HOSTNAME:
            return "topology_spread_topology"
    return None


def _anti_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _spread(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        c
        for c in spec.get("topologySpreadConstraints") or []
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]


@dataclass
class Placement:
    """Free resources and placed pods' labels per node, updated as the simulation places pods."""

    free: dict[str, Requests]
    labels: dict[str, list[tuple[str, Mapping[str, str]]]] = field(default_factory=dict)
    """node → (namespace, labels) of the pods on it (bound, nominated and simulated)."""

    def fits(self, node: str, need: Requests) -> bool:
        have = self.free.get(node, {})
        return all(have.get(r, Fraction(0)) >= v for r, v in need.items() if v > 0)

    def copy(self) -> Placement:
        return Placement(
            {k: dict(v) for k, v in self.free.items()},
            {k: list(v) for k, v in self.labels.items()},
        )

    def take(self, node: str, need: Requests, namespace: str, labels: Mapping[str, str]) -> None:
        have = self.free[node]
        for r, v in need.items():
            have[r] = have.get(r, Fraction(0)) - v
        self.labels.setdefault(node, []).append((namespace, labels))


def _selected(term: Mapping[str, Any], namespace: str, ns: str, labels: Mapping[str, str]) -> bool:
    spaces = term.get("namespaces") or [namespace]
    return ns in spaces and selector_matches(term.get("labelSelector") or {}, labels)


def _rules_ok(
    pod: Mapping[str, Any], namespace: str, node: str, world: Placement, nodes: Sequence[str]
) -> bool:
    """Required anti-affinity and DoNotSchedule spread on hostname, as the scheduler checks."""
    for term in _anti_terms(pod["spec"]):
        if any(_selected(term, namespace, ns, lb) for ns, lb in world.labels.get(node, [])):
            return False
    for c in _spread(pod["spec"]):
        sel = c.get("labelSelector") or {}
        term = {"labelSelector": sel}
        count = {
            n: sum(1 for ns, lb in world.labels.get(n, []) if _selected(term, namespace, ns, lb))
            for n in nodes
        }
        if count[node] + 1 - min(count.values(), default=0) > int(c.get("maxSkew") or 1):
            return False
    return True


@dataclass(frozen=True)
class Shape:
    """What a preview of one replica group needs before it reads any pod: the group's pod specs,
    their requests (with the ``pods`` slot) and the usable nodes of a matching flavor."""

    specs: list[Mapping[str, Any]]
    needs: list[Requests]
    usable: list[Node]

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(node_name(n) for n in self.usable)


def shape(
    group: Sequence[Mapping[str, Any]], nodes: Sequence[Node], delta: int
) -> Shape | Insufficient:
    """The group's ``Shape`` on these nodes, or why no placement can be simulated at all."""
    delta = max(delta, 0)
    specs = [t.get("spec") or {} for t in group]
    missing = next((f for f in map(unsupported, specs) if f), None)
    if missing is not None:
        return Insufficient(f"preview_unsupported:{missing}", {}, delta, 0)
    admitted = [admitted_tolerations(s) for s in specs]
    matching = [
        n for n in nodes if any(matches(s, n, t) for s, t in zip(specs, admitted, strict=True))
    ]
    if not matching:
        return Insufficient("no_matching_flavor", {}, delta, 0)
    needs = [{**pods.spec_requests(s), PODS: Fraction(1)} for s in specs]
    return Shape(specs, needs, [n for n in matching if node_usable(n)])


@dataclass
class World:
    """The usable nodes once the bound, nominated and queued pods have their places: what every
    replica group previewed on these nodes is placed on, and what a fit is committed to."""

    placement: Placement
    occupants: list[Pod]
    """The pods the shown free GPUs are counted from: bound, nominated (as bound to the node they
    were promised) and the queued ones placed (bound to their place), in that order."""
    pending: list[Pod]
    """The nominated and queued pods this world placed (valid only for a deploy owning none)."""


def world_for(
    usable: Sequence[Node],
    holding: Sequence[Pod],
    nominated: Sequence[Pod],
    queued: Sequence[Pod],
    requests_of: RequestsOf = parse_requests,
) -> World:
    placement = _world(usable, holding, nominated, requests_of)
    claimed = _serve_queue(queued, usable, placement, requests_of)
    occupants = [*holding, *(_as_bound(p) for p in nominated), *claimed]
    return World(placement, occupants, [*nominated, *queued])


def place(
    world: World,
    group: Sequence[Mapping[str, Any]],
    shaped: Shape,
    *,
    namespace: str,
    delta: int,
    requests_of: RequestsOf = parse_requests,
) -> CapacityPreview:
    """Do ``delta`` more replica groups fit on ``world``? A fit is committed to it (the groups'
    pods placed and counted as occupants); a miss leaves it as it was."""
    delta = max(delta, 0)
    trial = world.placement.copy()
    placed: list[Pod] = []
    for r in range(delta):
        spots = _place_group(group, shaped.needs, namespace, shaped.usable, trial)
        if spots is None:
            free = free_by_node(shaped.usable, world.occupants, requests_of)
            shown = {k: v for k, v in sorted(free.items()) if v > 0}
            return Insufficient("insufficient_capacity", shown, delta, r)
        placed.extend(_placed(group, spots, namespace))
    world.placement = trial
    world.occupants.extend(placed)
    return Fits(groups=delta)


def _placed(group: Sequence[Mapping[str, Any]], spots: Sequence[str], namespace: str) -> list[Pod]:
    """The pods of one placed group, bound where ``_place_group`` put them (GPU pods first)."""
    order = sorted(
        range(len(group)),
        key=lambda i: -pods.spec_requests(group[i].get("spec") or {}).get(names.GPU, Fraction(0)),
    )
    out: list[Pod] = []
    for i, spot in zip(order, spots, strict=False):
        meta = group[i].get("metadata") or {}
        spec = {**(group[i].get("spec") or {}), "nodeName": spot}
        out.append(
            {
                "metadata": {"namespace": namespace, "labels": dict(meta.get("labels") or {})},
                "spec": spec,
                "status": {"phase": "Pending"},
            }
        )
    return out


def preview(
    group: Sequence[Mapping[str, Any]],
    *,
    namespace: str,
    delta: int,
    nodes: Sequence[Node],
    holding: Sequence[Pod],
    nominated: Sequence[Pod] = (),
    queued: Sequence[Pod] = (),
    requests_of: RequestsOf = parse_requests,
) -> CapacityPreview:
    """Do ``delta`` more replica groups fit, node by node, now? ``group``: the pod templates
    (``{"metadata", "spec"}``) of one replica group, one per pod (an LWS: leader first).
    ``queued``: pending pods the scheduler will serve before ours (``queued_ahead``); each
    takes a place first, as the scheduler would give it one. ``requests_of``: how a bound,
    nominated or queued pod's requests are read (the watch cache's memo)."""
    shaped = shape(group, nodes, delta)
    if isinstance(shaped, Insufficient):
        return shaped
    world = world_for(shaped.usable, holding, nominated, queued, requests_of)
    return place(world, group, shaped, namespace=namespace, delta=delta, requests_of=requests_of)


def _world(
    usable: Sequence[Node],
    holding: Sequence[Pod],
    nominated: Sequence[Pod],
    requests_of: RequestsOf = parse_requests,
) -> Placement:
    world = Placement({node_name(n): node_allocatable(n) for n in usable})
    for p in [*holding, *nominated]:
        where = pods.node(p) or (p.get("status") or {}).get("nominatedNodeName")
        if where in world.free:
            need = {**requests_of(p), PODS: Fraction(1)}
            world.take(str(where), need, pods.namespace(p), pods.labels(p))
    return world


def _as_bound(pod: Pod, where: str | None = None) -> Pod:
    where = where or (pod.get("status") or {}).get("nominatedNodeName")
    return {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": where}}


def priority(spec: Mapping[str, Any]) -> int:
    """A pod's priority as the scheduler reads it (``spec.priority``, set at admission; 0 when
    absent: ``corev1helpers.PodPriority``)."""
    return int(spec.get("priority") or 0)


def queue_rank(template_spec: Mapping[str, Any]) -> tuple[str, str | int]:
    """What decides which pending pods are ahead of a pod of ``template_spec`` (``queued_ahead``):
    its priority class when the priority is not resolved, else its priority."""
    klass = template_spec.get("priorityClassName")
    if klass and template_spec.get("priority") is None:
        return ("class", str(klass))
    return ("priority", priority(template_spec))


def queued_ahead(pending: Iterable[Pod], template_spec: Mapping[str, Any]) -> list[Pod]:
    """The pending pods (no node, no nomination, not deleting) kube-scheduler's queue serves
    before a pod of ``template_spec``, in the order it serves them.

    The default queue sort is ``PrioritySort`` (``pkg/scheduler/framework/plugins/queuesort/
    priority_sort.go``): higher priority first, equal priority by the time the pod entered the
    queue. Our pods do not exist yet, so every pending pod of equal priority is ahead of them.
    A template that names a ``priorityClassName`` without a resolved ``priority`` has a value
    the preview cannot read: only pods of the same class are then known to be ahead."""
    klass = template_spec.get("priorityClassName")
    if klass and template_spec.get("priority") is None:

        def ahead(spec: Mapping[str, Any]) -> bool:
            return bool(spec.get("priorityClassName") == klass)
    else:
        ours = priority(template_spec)

        def ahead(spec: Mapping[str, Any]) -> bool:
            return priority(spec) >= ours

    found = [
        p
        for p in pending
        if not pods.node(p)
        and not (p.get("status") or {}).get("nominatedNodeName")
        and not pods.deleting(p)
        and not pods.terminal(p)
        and ahead(p.get("spec") or {})
    ]
    return sorted(
        found,
        key=lambda p: (
            -priority(p.get("spec") or {}),
            str((p.get("metadata") or {}).get("creationTimestamp") or ""),
        ),
    )


def _serve_queue(
    queued: Sequence[Pod],
    usable: Sequence[Node],
    world: Placement,
    requests_of: RequestsOf = parse_requests,
) -> list[Pod]:
    """Give each queued pod the place the scheduler would (on ``world``); the pods placed,
    bound to their node. A pod that fits nowhere takes nothing (it stays pending)."""
    placed: list[Pod] = []
    for p in queued:
        spec = p.get("spec") or {}
        need = {**requests_of(p), PODS: Fraction(1)}
        template = {"metadata": p.get("metadata") or {}, "spec": spec}
        spots = _place_group([template], [need], pods.namespace(p), usable, world)
        if spots:
            placed.append(_as_bound(p, spots[0]))
    return placed


def _place_group(
    group: Sequence[Mapping[str, Any]],
    needs: Sequence[Requests],
    namespace: str,
    usable: Sequence[Node],
    world: Placement,
) -> list[str] | None:
    """Place one group on distinct nodes of one flavor (most free GPUs first); commit or not.
    The nodes taken, pod by pod in placement order; None when the group does not fit."""
    by_flavor: dict[str, list[str]] = {}
    for n in usable:
        by_flavor.setdefault(node_labels(n).get(names.GPU_PRODUCT, ""), []).append(node_name(n))
    specs = {node_name(n): n for n in usable}
    for flavor in sorted(by_flavor):
        names_ = by_flavor[flavor]
        trial = world.copy()
        used: list[str] = []
        gpu_first = sorted(
            zip(group, needs, strict=True), key=lambda tn: -tn[1].get(names.GPU, Fraction(0))
        )
        for template, need in gpu_first:
            spec = template.get("spec") or {}
            tolerations = admitted_tolerations(spec)  # once per pod, not once per node
            labels = (template.get("metadata") or {}).get("labels") or {}
            sign = (
                -1 if need.get(names.GPU, 0) > 0 else 1
            )  # GPU pods: most free first; others: least
            order = sorted(
                names_,
                key=lambda n: (sign * trial.free[n].get(names.GPU, Fraction(0)), n),
            )
            spot = next(
                (
                    n
                    for n in order
                    if n not in used
                    and trial.fits(n, need)
                    and matches(spec, specs[n], tolerations)
                    and _rules_ok(template, namespace, n, trial, names_)
                ),
                None,
            )
            if spot is None:
                break
            used.append(spot)
            trial.take(spot, need, namespace, labels)
        else:
            world.free, world.labels = trial.free, trial.labels
            return used
    return None
