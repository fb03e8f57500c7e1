"""The adapter's watch cache: one informer per kind the passes read, shared by the process.

``build_core`` (the adapter factory, called once by the composition root) builds one
``ClusterCache`` and hands it to the ``K8sCore`` every edge of the process shares: the engine
loop, the sensors, the API. Reads of a pass come from it — nodes, pods (indexed by node,
namespace and deploy), the managed workloads (by deploy id), alias Services and HPAs — and cost no
request; mutations still send their preconditioned patch with the resourceVersion they read, so a
cache behind the server shows up as the 409 (``EtagMismatch``) the engine already handles.

A kind whose informer is not synced, or whose watch has been broken longer than
``InformerLimits.broken_limit_s``, answers ``None``: the caller reads the API server directly for
that call (counted in ``fallbacks`` and said in ``describe()``), so a broken watch never serves a
collection older than the limit. ``describe()`` gives each kind's age (since its last LIST, event,
bookmark or watch reopened) for ``pool describe``; ``metrics_text()`` the same as Prometheus
gauges.

A watch event of a pod or workload is mapped to the deploy id it belongs to (the pod's deploy-id
label; else its ReplicaSet's Deployment, or its LeaderWorkerSet, among the cached workloads) and
given to the subscribers (the engine loop's wake-up): a pod deleted wakes the follow-up now.
"""

# Decisions embodied here (docs/decisions.md):
# * “The Kubernetes adapter reads a pass from one watch cache per process”
# * “The alias guard and the quota preflight read the watch cache”
# * “A preview parses each pod's requests once per resourceVersion”
# * “A write's idempotency-key check reads the cache's ledger-key index”

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.informer import Informer, InformerLimits, ObjectStore
from gps_dagster.backends.k8s.pods import Pod, Requests, spec_requests

log = logging.getLogger(__name__)

PODS, NODES, DEPLOYMENTS, LWSS, SERVICES, HPAS, QUOTAS = (
    "pods",
    "nodes",
    "deployments",
    "leaderworkersets",
    "services",
    "hpas",
    "resourcequotas",
)
TEMPLATE_HASH = "pod-template-hash"
"""The label the Deployment controller puts on a ReplicaSet's pods: the suffix of its name."""


def _labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _namespace(obj: Obj) -> Iterable[str]:
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


def _node(obj: Obj) -> Iterable[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def _deploy_label(obj: Obj) -> Iterable[str]:
    found = _labels(obj).get(names.DEPLOY_ID)
    return [found] if found else []


def _ns_name(obj: Obj) -> Iterable[str]:
    meta = obj.get("metadata") or {}
    return [f"{meta.get('namespace', '')}/{meta.get('name', '')}"]


def _ledger_keys(obj: Obj) -> Iterable[str]:
    """The idempotency keys recorded in the workload's operation ledger (parsed once per change
    of the object, when the store indexes it: a key lookup is then a dict read)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(names.OPERATIONS)
    if not raw:
        return []
    try:
        ops = json.loads(raw).get("ops") or []
        return {str(op["key"]) for op in ops if isinstance(op, dict) and "key" in op}
    except (TypeError, ValueError, AttributeError):
        return []  # a hand-edited ledger: ``ledger.read`` does not trust it either


POD_INDEXERS = {"node": _node, "namespace": _namespace, "deploy": _deploy_label}
WORKLOAD_INDEXERS = {"deploy": _deploy_label, "name": _ns_name, "ledger_key": _ledger_keys}
NAMESPACED_INDEXERS = {"namespace": _namespace}


class ClusterCache:
    """Informers of the kinds a pass reads; ``None`` from a read means "read directly".

    ``lws``: also watch LeaderWorkerSets; while their API is not served, that informer retries
    quietly and the finder (which checks discovery itself) lists them directly if it ever must."""

    def __init__(
        self,
        kube: Kube,
        namespaces: Sequence[str] = (),
        *,
        lws: bool = True,
        limits: InformerLimits | None = None,
    ) -> None:
        self.kube, self.namespaces, self.limits = (
            kube,
            tuple(namespaces),
            limits or InformerLimits(),
        )
        self.fallbacks: dict[str, int] = {}
        self.parsed: dict[str, tuple[str, Requests]] = {}
        """Pod uid → (resourceVersion, its parsed requests): ``requests_of``'s memo."""
        self._parsed_at = 0
        self._subscribers: list[Callable[[frozenset[str]], None]] = []
        self._lock = threading.Lock()
        core, apps, auto = kube.core, kube.apps, kube.autoscaling
        self.informers: dict[str, list[Informer]] = {
            NODES: [self._informer(NODES, core.list_node)],
            PODS: [
                Informer(
                    kube,
                    PODS,
                    core.list_pod_for_all_namespaces,
                    limits=self.limits,
                    on_event=self._pod_event,
                    indexers=POD_INDEXERS,
                )
            ],
            DEPLOYMENTS: self._scoped(
                DEPLOYMENTS,
                apps.list_namespaced_deployment,
                apps.list_deployment_for_all_namespaces,
                indexers=WORKLOAD_INDEXERS,
                label_selector=names.DEPLOY_ID,
            ),
            SERVICES: self._scoped(
                SERVICES,
                core.list_namespaced_service,
                core.list_service_for_all_namespaces,
                indexers=NAMESPACED_INDEXERS,
                label_selector=names.ALIAS_OF,
            ),
            HPAS: self._scoped(
                HPAS,
                auto.list_namespaced_horizontal_pod_autoscaler,
                auto.list_horizontal_pod_autoscaler_for_all_namespaces,
                indexers=NAMESPACED_INDEXERS,
            ),
            QUOTAS: self._scoped(
                QUOTAS,
                core.list_namespaced_resource_quota,
                core.list_resource_quota_for_all_namespaces,
                indexers=NAMESPACED_INDEXERS,
            ),
        }
        if lws:
            group = (names.LWS_GROUP, names.LWS_VERSION)
            c = kube.custom
            self.informers[LWSS] = (
                [
                    self._informer(
                        LWSS,
                        c.list_namespaced_custom_object,
                        *group,
                        ns,
                        names.LWS_PLURAL,
                        indexers=WORKLOAD_INDEXERS,
                        label_selector=names.DEPLOY_ID,
                    )
                    for ns in self.namespaces
                ]
                if self.namespaces
                else [
                    self._informer(
                        LWSS,
                        c.list_cluster_custom_object,
                        *group,
                        names.LWS_PLURAL,
                        indexers=WORKLOAD_INDEXERS,
                        label_selector=names.DEPLOY_ID,
                    )
                ]
            )

    def _informer(self, kind: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Informer:
        return Informer(self.kube, kind, fn, *args, limits=self.limits, on_event=self._event, **kw)

    def _scoped(
        self, kind: str, ns_fn: Callable[..., Any], all_fn: Callable[..., Any], **kw: Any
    ) -> list[Informer]:
        if not self.namespaces:
            return [self._informer(kind, all_fn, **kw)]
        return [self._informer(kind, ns_fn, ns, **kw) for ns in self.namespaces]

    # -- lifecycle ---------------------------------------------------------------------------------

    def _all(self) -> list[Informer]:
        return [i for group in self.informers.values() for i in group]

    def start(self) -> ClusterCache:
        for informer in self._all():
            informer.start()
        return self

    def wait_synced(self, timeout_s: float) -> bool:
        """Whether every informer listed once within ``timeout_s`` (reads fall back until then)."""
        return all(i.wait_synced(timeout_s) for i in self._all())

    def stop(self) -> None:
        for informer in self._all():
            informer.stop()

    # -- reads -------------------------------------------------------------------------------------

    def _read(self, kind: str, fn: Callable[[ObjectStore], list[Obj]]) -> list[Obj] | None:
        group = self.informers.get(kind)
        if not group or not all(i.usable() for i in group):
            with self._lock:
                self.fallbacks[kind] = self.fallbacks.get(kind, 0) + 1
            return None
        out: list[Obj] = []
        for informer in group:
            out += informer.read(fn)
        return out

    def nodes(self) -> list[Obj] | None:
        return self._read(NODES, ObjectStore.all)

    def pods(self, namespace: str | None = None) -> list[Obj] | None:
        if namespace is None:
            return self._read(PODS, ObjectStore.all)
        return self._read(PODS, lambda s: s.by_index("namespace", namespace))

    def workloads(self, kind: str) -> list[Obj] | None:
        """Every cached Deployment (``DEPLOYMENTS``) or LeaderWorkerSet (``LWSS``) carrying the
        deploy-id label."""
        return self._read(kind, ObjectStore.all)

    def workloads_of(self, kind: str, deploy_ids: Iterable[str]) -> list[Obj] | None:
        """The cached workloads of ``kind`` labelled with these deploy ids (by index)."""
        ids = list(deploy_ids)
        return self._read(kind, lambda s: [o for i in ids for o in s.by_index("deploy", i)])

    def services(self, namespace: str) -> list[Obj] | None:
        return self._read(SERVICES, lambda s: s.by_index("namespace", namespace))

    def hpas(self, namespace: str) -> list[Obj] | None:
        return self._read(HPAS, lambda s: s.by_index("namespace", namespace))

    def quotas(self, namespace: str) -> list[Obj] | None:
        """The namespace's ResourceQuotas (their ``status.used`` as the watch last saw it)."""
        return self._read(QUOTAS, lambda s: s.by_index("namespace", namespace))

    def workloads_with_key(self, kind: str, key: str) -> list[Obj] | None:
        """The cached workloads of ``kind`` whose operation ledger records ``key`` (by index)."""
        return self._read(kind, lambda s: s.by_index("ledger_key", key))

    def requests_of(self, pod: Pod) -> Requests:
        """The pod's effective requests (``spec_requests``), parsed once per pod
        resourceVersion: a preview over every bound pod re-reads them, it does not re-parse
        them. A pod without uid or resourceVersion (a simulated one) is parsed each time.
        The answer is shared: callers copy before changing it."""
        meta = pod.get("metadata") or {}
        uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if not uid or not version:
            return spec_requests(pod.get("spec") or {})
        self._prune_parsed()
        seen = self.parsed.get(uid)
        if seen is not None and seen[0] == version:
            return seen[1]
        parsed = spec_requests(pod.get("spec") or {})
        self.parsed[uid] = (version, parsed)  # one dict store: atomic under the GIL
        return parsed

    def _pod_event(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.parsed.pop(str((obj.get("metadata") or {}).get("uid") or ""), None)
        self._event(kind, obj)

    def _prune_parsed(self) -> None:
        """After a relist (deletions it replaced were never seen as events): keep the memo of
        the pods still cached only, so it never outgrows the pod collection."""
        informer = self.informers[PODS][0]
        if informer.state.relists == self._parsed_at:
            return
        self._parsed_at = informer.state.relists
        live = {
            str((p.get("metadata") or {}).get("uid") or "") for p in informer.read(ObjectStore.all)
        }
        for uid in [u for u in self.parsed if u not in live]:
            self.parsed.pop(uid, None)

    # -- what it reports ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Per kind: the mode reads are in, the collection's age, relists, watches, fallbacks."""
        kinds: dict[str, Any] = {}
        for kind, group in self.informers.items():
            ages = [i.age_s() for i in group]
            usable = all(i.usable() for i in group)
            kinds[kind] = {
                "mode": "watch" if usable else "direct",
                "age_s": None if None in ages else round(max(a for a in ages if a is not None), 3),
                "synced": all(i.state.synced for i in group),
                "relists": sum(i.state.relists for i in group),
                "watches": sum(i.state.watches for i in group),
                "fallbacks": self.fallbacks.get(kind, 0),
                "errors": [e for i in group for e in i.state.errors][-3:],
            }
        worst = [k["age_s"] for k in kinds.values() if k["age_s"] is not None]
        return {
            "mode": "watch" if all(k["mode"] == "watch" for k in kinds.values()) else "direct",
            "age_s": max(worst) if worst else None,
            "broken_limit_s": self.limits.broken_limit_s,
            "kinds": kinds,
        }

    def metrics_text(self) -> str:
        """The cache's age and mode per kind, as Prometheus gauges (text exposition)."""
        state = self.describe()["kinds"]
        lines = [
            "# HELP gps_k8s_cache_age_seconds Seconds since the kind's last LIST, watch event, "
            "bookmark or watch reopened",
            "# TYPE gps_k8s_cache_age_seconds gauge",
        ]
        lines += [
            f'gps_k8s_cache_age_seconds{{kind="{k}"}} {float(v["age_s"])}'
            for k, v in sorted(state.items())
            if v["age_s"] is not None
        ]
        lines += [
            "# HELP gps_k8s_cache_direct 1 while the kind's reads go to the API server directly "
            "(not synced, or its watch broken beyond the limit)",
            "# TYPE gps_k8s_cache_direct gauge",
        ]
        lines += [
            f'gps_k8s_cache_direct{{kind="{k}"}} {1.0 if v["mode"] == "direct" else 0.0}'
            for k, v in sorted(state.items())
        ]
        return "\n".join(lines) + "\n"

    # -- wake-ups ----------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[frozenset[str]], None]) -> None:
        """``callback`` gets the deploy ids each watch event concerns (on an informer thread)."""
        with self._lock:
            self._subscribers.append(callback)

    def _event(self, kind: str, obj: Obj) -> None:
        if kind == "SYNC" or not self._subscribers:
            return
        ids = frozenset(self.deploy_ids(obj))
        if not ids:
            return
        for callback in list(self._subscribers):
            try:
                callback(ids)
            except Exception as exc:  # a subscriber's fault must not end the watch
                log.warning("cache subscriber failed: %s", exc)

    def deploy_ids(self, obj: Obj) -> set[str]:
        """The deploy ids a pod or workload belongs to (its label, else its owning workload)."""
        own = set(_deploy_label(obj))
        if own:
            return own
        meta = obj.get("metadata") or {}
        ns, labels = str(meta.get("namespace") or ""), _labels(obj)
        wanted: list[tuple[str, str]] = []
        lws = labels.get(names.LWS_NAME)
        if lws:
            wanted.append((LWSS, f"{ns}/{lws}"))
        suffix = labels.get(TEMPLATE_HASH)
        for ref in meta.get("ownerReferences") or []:
            rs = str(ref.get("name") or "")
            if ref.get("kind") == "ReplicaSet" and suffix and rs.endswith(f"-{suffix}"):
                wanted.append((DEPLOYMENTS, f"{ns}/{rs[: -len(suffix) - 1]}"))
        out: set[str] = set()
        for kind, name in wanted:
            for informer in self.informers.get(kind, []):
                for w in informer.read(lambda s, n=name: s.by_index("name", n)):  # type: ignore[misc]
                    out.update(_deploy_label(w))
        return out
