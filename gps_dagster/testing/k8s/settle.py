"""Wait until a real control plane has reacted to everything, at one (virtual) instant.

Tests and the demo run the fakes on a virtual clock; the controllers and the scheduler run on
wall time and take milliseconds to react. ``settle`` is the bridge: it drives the fakes at the
clock's ``now`` and polls until nothing is in motion, so a test observes "the cluster at that
instant" instead of racing the controllers. Quiet means:

* every Deployment and ReplicaSet has observed its generation, each ReplicaSet has exactly its
  replicas of live pods, and their status counts agree with the pods;
* every pending pod either cannot fit anywhere (and carries the scheduler's Unschedulable
  verdict) or is not pending any more — a pod that fits is waited for, however it is scheduled;
* each ResourceQuota's ``used`` GPUs equal the requests of its namespace's pods;
* the fakes had nothing left to do at ``now``.

It only waits: it never changes what the cluster decides. A cluster that does not settle in
``timeout_s`` is an error naming what is still moving.
"""

# Decisions embodied here (docs/decisions.md):
# * “Tests run the cluster on a virtual clock”
# * “The end-to-end clock waits for the workload controllers, not for quiet”

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gps_dagster.backends.k8s import capacity, names, pods
from gps_dagster.backends.k8s.api import Kube, Obj

Step = Callable[[], bool]
"""A fake's sync: True when it changed something (another round is needed)."""


class NotSettled(RuntimeError):
    pass


def settle(
    kube: Kube,
    namespaces: Collection[str],
    steps: Sequence[Step],
    *,
    timeout_s: float = 60.0,
    poll_s: float = 0.02,
) -> int:
    """Run the fakes' steps and wait until quiet; returns the number of rounds."""
    deadline = time.monotonic() + timeout_s
    rounds = 0
    while True:
        rounds += 1
        moved = False
        for step in steps:
            moved |= step()
        problems = [] if moved else unquiet(kube, namespaces)
        if not moved and not problems:
            return rounds
        if time.monotonic() > deadline:
            raise NotSettled(
                f"cluster not settled after {timeout_s} s: "
                f"{problems[:5] or 'the fakes keep moving'}"
            )
        time.sleep(poll_s)


def unquiet(kube: Kube, namespaces: Collection[str]) -> list[str]:
    """What is still in motion (empty = quiet)."""
    problems: list[str] = []
    all_pods: list[Obj] = []
    for ns in sorted(namespaces):
        ns_pods = kube.items(kube.core.list_namespaced_pod, ns, what="list pods")
        all_pods += ns_pods
        problems += _workloads(kube, ns, ns_pods)
        problems += _quotas(kube, ns, ns_pods)
        if problems:
            return problems
    return _pending(kube, all_pods)


def controllers_behind(kube: Kube, ns: str, ns_pods: list[Obj]) -> list[str]:
    """What the ReplicaSet and Deployment controllers of ``ns`` still owe (empty = caught up):
    a generation not observed, a ReplicaSet without its replicas of live pods (unless the API
    server refused one: ``ReplicaFailure``), status counts that disagree with the pods, or a
    ReplicaSet's ``ReplicaFailure`` not yet copied onto its Deployment (the Deployment controller
    copies it, ``pkg/controller/deployment/progress.go`` ``getReplicaFailures``). The end-to-end
    world holds its clock on this alone (decision 220); ``settle`` waits for it and more."""
    return _workloads(kube, ns, ns_pods)


def _owned(pod: Obj, uid: str) -> bool:
    return any(
        o.get("uid") == uid for o in (pod.get("metadata") or {}).get("ownerReferences") or []
    )


def _workloads(kube: Kube, ns: str, ns_pods: list[Obj]) -> list[str]:
    out: list[str] = []
    rsets = kube.items(kube.apps.list_namespaced_replica_set, ns, what="list replicasets")
    by_owner: dict[str, list[int]] = {}
    failed_owners: set[str] = set()
    for rs in rsets:
        meta, spec, status = rs["metadata"], rs.get("spec") or {}, rs.get("status") or {}
        live = [
            p
            for p in ns_pods
            if _owned(p, meta["uid"]) and not pods.terminal(p) and not pods.deleting(p)
        ]
        ready = sum(1 for p in live if pods.ready(p))
        want = int(spec.get("replicas") or 0)
        seen = (
            int(status.get("observedGeneration") or 0),
            int(status.get("replicas") or 0),
            int(status.get("readyReplicas") or 0),
        )
        refused = _replica_failure(status)  # e.g. exceeded quota: nothing will come
        if not refused and (
            seen != (int(meta.get("generation") or 0), len(live), ready) or len(live) != want
        ):
            out.append(
                f"replicaset {ns}/{meta['name']}: want {want}, live {len(live)}, ready "
                f"{ready}, status {seen}"
            )
        for o in meta.get("ownerReferences") or []:
            by_owner.setdefault(o.get("uid", ""), [0, 0])
            by_owner[o["uid"]][0] += int(status.get("replicas") or 0)
            by_owner[o["uid"]][1] += int(status.get("readyReplicas") or 0)
            if refused:
                failed_owners.add(o.get("uid", ""))
    for d in kube.items(kube.apps.list_namespaced_deployment, ns, what="list deployments"):
        meta, status = d["metadata"], d.get("status") or {}
        sums = by_owner.get(meta["uid"], [0, 0])
        seen = (
            int(status.get("observedGeneration") or 0),
            int(status.get("replicas") or 0),
            int(status.get("readyReplicas") or 0),
        )
        if seen != (int(meta.get("generation") or 0), sums[0], sums[1]):
            out.append(f"deployment {ns}/{meta['name']}: status {seen}, replicasets {sums}")
        elif meta["uid"] in failed_owners and not _replica_failure(status):
            out.append(f"deployment {ns}/{meta['name']}: ReplicaFailure not copied yet")
    return out


def _replica_failure(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "ReplicaFailure" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _quotas(kube: Kube, ns: str, ns_pods: list[Obj]) -> list[str]:
    key = "requests." + names.GPU
    out = []
    for q in kube.items(kube.core.list_namespaced_resource_quota, ns, what="list quotas"):
        if key not in ((q.get("spec") or {}).get("hard") or {}):
            continue
        used = pods.quantity(((q.get("status") or {}).get("used") or {}).get(key))
        want = sum(pods.gpus(p) for p in ns_pods if not pods.terminal(p))
        if used != want:
            out.append(
                f"resourcequota {ns}/{q['metadata']['name']}: used {used}, pods request {want}"
            )
    return out


def pending_verdicts(kube: Kube, ours: list[Obj]) -> list[str]:
    """Pending pods of ``ours`` the default scheduler has not judged yet, or that fit a node now
    (the end-to-end world waits for these alone before it moves its clock)."""
    return _pending(kube, ours)


def _pending(kube: Kube, ours: list[Obj]) -> list[str]:
    waiting = [
        p for p in ours if not pods.node(p) and not pods.terminal(p) and not pods.deleting(p)
    ]
    if not waiting:
        return []
    nodes = kube.items(kube.core.list_node, what="list nodes")
    bound = pods.holding(
        kube.items(
            kube.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName!=",
            what="list bound pods",
        )
    )
    free = _free_resources(nodes, bound)
    out = []
    for p in waiting:
        spec: dict[str, Any] = p.get("spec") or {}
        default = spec.get("schedulerName", "default-scheduler") == "default-scheduler"
        want = _requests(p)
        fits = default and any(
            capacity.node_usable(n)
            and capacity.matches(spec, n)
            and all(free[capacity.node_name(n)][r] >= v for r, v in want.items())
            and _spread_ok(p, n, bound)
            for n in nodes
        )
        if fits or not pods.unschedulable(p):
            out.append(
                f"pod {pods.namespace(p)}/{pods.name(p)} pending "
                f"({'fits' if fits else 'not yet judged'})"
            )
    return out


_SUFFIX = {
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
RESOURCES = ("cpu", "memory", names.GPU)


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``10m``, ``16Mi``, ``8``) as a number."""
    text = str(value)
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIX[suffix]
    return float(text)


def _requests(pod: Obj) -> dict[str, float]:
    total = dict.fromkeys(RESOURCES, 0.0)
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for r in RESOURCES:
            if r in asked:
                total[r] += quantity(asked[r])
    return total


def _free_resources(nodes: Sequence[Obj], bound: Sequence[pods.Pod]) -> dict[str, dict[str, float]]:
    """Allocatable minus the requests of bound live pods, per node and resource."""
    free = {
        capacity.node_name(n): {
            r: quantity(((n.get("status") or {}).get("allocatable") or {}).get(r, 0))
            for r in RESOURCES
        }
        for n in nodes
    }
    for p in bound:
        where = pods.node(p)
        if where in free:
            for r, v in _requests(dict(p)).items():
                free[where][r] -= v
    return free


def _spread_ok(pod: Obj, node: Obj, bound: Sequence[pods.Pod]) -> bool:
    """Required pod anti-affinity on the hostname (LWS groups): no matching pod on the node yet."""
    terms = (((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    name = capacity.node_name(node)
    for term in terms:
        match = (term.get("labelSelector") or {}).get("matchLabels") or {}
        for other in bound:
            if (
                pods.node(other) == name
                and pods.namespace(other) == pods.namespace(pod)
                and all(pods.labels(other).get(k) == v for k, v in match.items())
            ):
                return False
    return True
