"""Finding a deploy's workload by its label, and the one shape the adapter reads it in.

A deploy is the workload labelled ``gps.dagster.io/deploy-id=<id>`` in the adapter's namespaces
(SPEC R-K8S-1): a Deployment first, then a LeaderWorkerSet (multi-node replica groups) when the
LWS API is served. A StatefulSet, DaemonSet or Job carrying the label is reported with a kind the
engine refuses (``unsupported_kind``), never silently ignored; two workloads with one id are an
error, since acting on either could be the wrong one.
"""

# Decisions embodied here (docs/decisions.md):
# * “Controller-owned workloads are `unsupported_kind`; a duplicate deploy id is left out of the
#   batched read”

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.domain.kinds import DeployKind
from gps_dagster.ports import NotFound, Permanent, Unsupported

DEPLOYMENT = "Deployment"
LWS = "LeaderWorkerSet"
CACHE_KINDS = {DEPLOYMENT: "deployments", LWS: "leaderworkersets"}
"""The watch cache's name of each managed kind (``cache.DEPLOYMENTS`` / ``cache.LWSS``)."""
OTHER_KINDS = {
    "StatefulSet": DeployKind.OTHER,
    "DaemonSet": DeployKind.OTHER,
    "Job": DeployKind.BATCH,
}


@dataclass(frozen=True, slots=True)
class Workload:
    """A labelled workload, normalised across Deployment and LeaderWorkerSet."""

    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    replicas: int
    """``spec.replicas``: 0 when stopped."""
    selector: Mapping[str, Any]
    """A LabelSelector (matchLabels / matchExpressions) of the workload's pods."""
    template: Mapping[str, Any]
    """The pod template the GPU request is read from (an LWS's worker template)."""
    group_size: int
    """Pods per replica group: 1 for a Deployment, ``leaderWorkerTemplate.size`` for an LWS."""
    status: Mapping[str, Any]
    deleting: bool
    raw: Obj

    @property
    def deploy_id(self) -> str:
        return self.labels[names.DEPLOY_ID]

    @property
    def controller(self) -> str | None:
        """``Kind/name`` of the controller owning this workload (KServe, Dynamo, Seldon …), which
        would revert any scale we write; None for a workload people own."""
        for ref in (self.raw.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("controller"):
                return f"{ref.get('kind', '?')}/{ref.get('name', '?')}"
        return None

    @property
    def deploy_kind(self) -> DeployKind:
        if self.controller is not None:
            return DeployKind.OTHER
        if self.kind == DEPLOYMENT:
            return DeployKind.DEPLOYMENT
        if self.kind == LWS:
            return DeployKind.LEADER_WORKER_SET
        return OTHER_KINDS.get(self.kind, DeployKind.OTHER)

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def from_object(kind: str, obj: Obj) -> Workload:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if kind == LWS:
        lwt = spec.get("leaderWorkerTemplate") or {}
        template = lwt.get("workerTemplate") or lwt.get("leaderTemplate") or {}
        size = int(lwt.get("size") or 1)
        selector: Mapping[str, Any] = {"matchLabels": {names.LWS_NAME: meta.get("name", "")}}
    else:
        template = (
            spec.get("template")
            or spec.get("jobTemplate", {}).get("spec", {}).get("template")
            or {}
        )
        size = 1
        selector = spec.get("selector") or {}
    replicas = spec.get("replicas", 1 if kind in (DEPLOYMENT, LWS) else 0)
    return Workload(
        kind=kind,
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=str(meta.get("resourceVersion", "")),
        generation=int(meta.get("generation") or 0),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        replicas=int(replicas or 0),
        selector=selector,
        template=template,
        group_size=size,
        status=obj.get("status") or {},
        deleting=bool(meta.get("deletionTimestamp")),
        raw=obj,
    )


def selector_string(selector: Mapping[str, Any]) -> str:
    """A LabelSelector as the ``labelSelector`` query syntax."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(parts)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Client-side LabelSelector match (an empty selector matches nothing, as for workloads)."""
    match, exprs = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
    if not match and not exprs:
        return False
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for expr in exprs:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels[key] in values,
            "NotIn": not present or labels[key] not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


def query_matches(query: str, labels: Mapping[str, str]) -> bool:
    """Client-side match of the label queries the finder sends (``k``, ``k=v``, ``k in (a,b)``,
    comma-joined), so that a cached collection answers what the LIST would have."""
    for key, allowed in _parsed_query(query):
        if allowed is None:
            if key not in labels:
                return False
        elif labels.get(key) not in allowed:
            return False
    return True


@functools.lru_cache(maxsize=256)
def _parsed_query(query: str) -> tuple[tuple[str, frozenset[str] | None], ...]:
    """``query`` as (key, allowed values — None: the key only) terms; parsed once per query, not
    once per cached object it is matched against."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(query):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(query[start:i])
            start = i + 1
    parts.append(query[start:])
    terms: list[tuple[str, frozenset[str] | None]] = []
    for part in (p.strip() for p in parts if p.strip()):
        if " in (" in part:
            key, values = part.split(" in (", 1)
            terms.append((key.strip(), frozenset(v.strip() for v in values.rstrip(")").split(","))))
        elif "=" in part:
            key, value = part.split("=", 1)
            terms.append((key.strip(), frozenset({value.strip()})))
        else:
            terms.append((part, None))
    return tuple(terms)


def deploy_ids_of(query: str) -> frozenset[str] | None:
    """The deploy ids a finder query asks for by label value, or None (every labelled one)."""
    for key, allowed in _parsed_query(query):
        if key == names.DEPLOY_ID and allowed is not None:
            return allowed
    return None


class WorkloadSource(Protocol):
    """The watch cache's workloads (``cache.ClusterCache``): None means "list them directly"."""

    def workloads(self, kind: str) -> list[Obj] | None: ...

    def workloads_of(self, kind: str, deploy_ids: Iterable[str]) -> list[Obj] | None:
        """The cached ones labelled with these deploy ids (the cache's deploy-id index)."""
        ...


class Finder:
    """Lists labelled workloads of the adapter's namespaces (empty = every namespace); the
    Deployments and LeaderWorkerSets come from ``source`` (the watch cache) when it answers."""

    def __init__(
        self,
        kube: Kube,
        namespaces: Sequence[str],
        lws: bool,
        source: WorkloadSource | None = None,
    ) -> None:
        self.kube, self.namespaces, self.lws = kube, tuple(namespaces), lws
        self.source = source
        self._made: dict[tuple[str, str, str], tuple[Obj, Workload]] = {}
        """(kind, namespace, name) → the cached object and the ``Workload`` made of it: the
        cache replaces an object on every change, so the same object is the same workload."""

    def _workload(self, kind: str, obj: Obj) -> Workload:
        meta = obj.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        made = self._made.get(key)
        if made is not None and made[0] is obj:
            return made[1]
        w = from_object(kind, obj)
        self._made[key] = (obj, w)
        return w

    def _cached(self, kind: str, selector: str) -> list[Workload] | None:
        if self.source is None:
            return None
        ids = deploy_ids_of(selector)  # find / find_many: the index, not a scan of every one
        found = (
            self.source.workloads(CACHE_KINDS[kind])
            if ids is None
            else self.source.workloads_of(CACHE_KINDS[kind], sorted(ids))
        )
        if found is None:
            return None
        if ids is None and len(self._made) > 2 * len(found) + 100:
            self._made.clear()  # deleted workloads' entries: dropped when they dominate
        return [
            self._workload(kind, o)
            for o in found
            if query_matches(selector, (o.get("metadata") or {}).get("labels") or {})
        ]

    def _scoped(self, ns_fn: Any, all_fn: Any, what: str, *args: Any, **kw: Any) -> list[Obj]:
        if not self.namespaces:
            return self.kube.items(all_fn, *args, what=what, **kw)
        out: list[Obj] = []
        for ns in self.namespaces:
            out.extend(self.kube.items(ns_fn, *_ns_args(ns_fn, ns, args), what=what, **kw))
        return out

    def deployments(self, selector: str) -> list[Workload]:
        cached = self._cached(DEPLOYMENT, selector)
        if cached is not None:
            return cached
        a = self.kube.apps
        found = self._scoped(
            a.list_namespaced_deployment,
            a.list_deployment_for_all_namespaces,
            "list deployments",
            label_selector=selector,
        )
        return [from_object(DEPLOYMENT, o) for o in found]

    def leader_worker_sets(self, selector: str) -> list[Workload]:
        if not self.lws:
            return []
        cached = self._cached(LWS, selector)
        if cached is not None:
            return cached
        c = self.kube.custom
        group = (names.LWS_GROUP, names.LWS_VERSION)
        found = self._scoped(
            c.list_namespaced_custom_object,
            c.list_cluster_custom_object,
            "list leaderworkersets",
            *group,
            names.LWS_PLURAL,
            label_selector=selector,
        )
        return [from_object(LWS, o) for o in found]

    def unsupported(self, selector: str) -> list[Workload]:
        a, b = self.kube.apps, self.kube.batch
        out = [
            from_object("StatefulSet", o)
            for o in self._scoped(
                a.list_namespaced_stateful_set,
                a.list_stateful_set_for_all_namespaces,
                "list statefulsets",
                label_selector=selector,
            )
        ]
        out += [
            from_object("DaemonSet", o)
            for o in self._scoped(
                a.list_namespaced_daemon_set,
                a.list_daemon_set_for_all_namespaces,
                "list daemonsets",
                label_selector=selector,
            )
        ]
        out += [
            from_object("Job", o)
            for o in self._scoped(
                b.list_namespaced_job,
                b.list_job_for_all_namespaces,
                "list jobs",
                label_selector=selector,
            )
        ]
        return out

    def managed(self, selector: str) -> list[Workload]:
        return self.deployments(selector) + self.leader_worker_sets(selector)

    def find(self, deploy_id: str) -> Workload:
        """The one workload labelled with ``deploy_id``; ``NotFound`` if none."""
        selector = f"{names.DEPLOY_ID}={deploy_id}"
        found = self.managed(selector) or self.unsupported(selector)
        return one(deploy_id, found)

    def find_many(self, deploy_ids: Iterable[str]) -> dict[str, Workload]:
        """Workloads of several ids in one list per kind; unknown ids are left out."""
        ids = sorted(set(deploy_ids))
        if not ids:
            return {}
        found = self.managed(f"{names.DEPLOY_ID} in ({','.join(ids)})")
        by_id: dict[str, list[Workload]] = {}
        for w in found:
            by_id.setdefault(w.deploy_id, []).append(w)
        missing = [i for i in ids if i not in by_id]
        if missing:
            for w in self.unsupported(f"{names.DEPLOY_ID} in ({','.join(missing)})"):
                by_id.setdefault(w.deploy_id, []).append(w)
        # a duplicated id is left out: its own read reports it, the rest of the batch stands
        return {i: ws[0] for i, ws in by_id.items() if len(ws) == 1}

    def all_labelled(self) -> list[Workload]:
        return self.managed(names.DEPLOY_ID)


def _ns_args(fn: Any, ns: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Custom-object list calls take the namespace after group and version."""
    if getattr(fn, "__name__", "") == "list_namespaced_custom_object":
        return (*args[:2], ns, *args[2:])
    return (ns, *args)


def one(deploy_id: str, found: list[Workload]) -> Workload:
    if not found:
        raise NotFound(f"no workload labelled {names.DEPLOY_ID}={deploy_id}")
    if len(found) > 1:
        refs = ", ".join(sorted(w.ref for w in found))
        raise Permanent(
            f"deploy id {deploy_id} labels {len(found)} workloads ({refs}); keep the label on "
            "exactly one",
            reason="duplicate_deploy_id",
        )
    return found[0]


def refuse_controlled(w: Workload) -> None:
    """A controller-owned workload (ownerReferences ``controller: true``) is never written."""
    if w.controller is not None:
        raise Unsupported(
            "unsupported_kind",
            f"{w.ref} is controlled by {w.controller}, which reverts any change to it; schedule "
            f"the {w.controller.split('/')[0]} itself, or remove {names.DEPLOY_ID} from {w.ref}",
        )


def patch(kube: Kube, w: Workload, body: Obj) -> Workload:
    """Merge-patch the workload (the body carries the resourceVersion precondition)."""
    refuse_controlled(w)
    if w.kind == DEPLOYMENT:
        out = kube.merge_patch(
            kube.apps.patch_namespaced_deployment,
            w.name,
            w.namespace,
            body=body,
            what=f"patch {w.ref}",
        )
    elif w.kind == LWS:
        out = kube.merge_patch(
            kube.custom.patch_namespaced_custom_object,
            names.LWS_GROUP,
            names.LWS_VERSION,
            w.namespace,
            names.LWS_PLURAL,
            w.name,
            body=body,
            what=f"patch {w.ref}",
        )
    else:
        raise Permanent(
            f"{w.ref} is not a Deployment or LeaderWorkerSet", reason="unsupported_kind"
        )
    return from_object(w.kind, out)


def read(kube: Kube, kind: str, namespace: str, name: str) -> Workload:
    if kind == DEPLOYMENT:
        obj = kube.call(
            kube.apps.read_namespaced_deployment,
            name,
            namespace,
            what=f"read {kind}/{namespace}/{name}",
        )
    elif kind == LWS:
        obj = kube.call(
            kube.custom.get_namespaced_custom_object,
            names.LWS_GROUP,
            names.LWS_VERSION,
            namespace,
            names.LWS_PLURAL,
            name,
            what=f"read {kind}/{namespace}/{name}",
        )
    else:
        raise NotFound(f"no operation on {kind}/{namespace}/{name}")
    return from_object(kind, obj)
