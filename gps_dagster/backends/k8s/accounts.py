"""Quota, billing and the alias guard on Kubernetes (SPEC R-K8S-5).

* **Quota** is the namespace's ``ResourceQuota`` on ``requests.nvidia.com/gpu`` — what the API
  server itself enforces when the ReplicaSet creates the pods. The preflight refuses a request
  that would exceed the tightest such quota (``used`` from the quota's status), so the engine never
  releases A for a B the cluster would refuse anyway.
* **Billing** is pluggable (``BillingCheck``). The default, ``NamespaceBilling``, refuses CMP
  deploys of a namespace annotated ``gps.dagster.io/billing: unpaid`` — a billing system marks
  the namespace, the adapter reads the mark. Admin deploys (no project) are not billed.
* **Aliases** are the workload's ``gps.dagster.io/aliases`` annotation plus every Service labelled
  ``gps.dagster.io/alias-of=<deploy id>`` in its namespace. The guard fails closed: a 403 means it
  is not wired (no RBAC on Services), any other failure that it could not be read.
"""

# Decisions embodied here (docs/decisions.md):
# * “Quota on Kubernetes is the namespace's ResourceQuota”
# * “Quota credits are keyed by the quota the core names”
# * “The alias guard and the quota preflight read the watch cache”

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.views import annotation_aliases
from gps_dagster.backends.k8s.workloads import Workload
from gps_dagster.ports import (
    AliasGuardUnavailable,
    BillingRefused,
    CoreError,
    QuotaRefused,
    QuotaStatus,
)

QUOTA_KEY = "requests." + names.GPU


class BillingCheck(Protocol):
    """Raises ``BillingRefused`` when the deploy's account may not start GPUs now."""

    def __call__(self, kube: Kube, workload: Workload) -> None: ...


class NamespaceBilling:
    """The default billing check: ``gps.dagster.io/billing: unpaid`` on the namespace refuses."""

    def __call__(self, kube: Kube, workload: Workload) -> None:
        project = workload.labels.get(names.PROJECT)
        if not project:
            return
        ns = kube.call(
            kube.core.read_namespace,
            workload.namespace,
            what=f"read namespace {workload.namespace}",
        )
        mark = ((ns.get("metadata") or {}).get("annotations") or {}).get(names.BILLING, "")
        if mark.lower() == "unpaid":
            raise BillingRefused(
                f"project {project} (namespace {workload.namespace}) is unpaid: the namespace is "
                f"annotated {names.BILLING}=unpaid",
                project=project,
            )


def gpu_quotas(
    quotas: Sequence[Obj], spec: Mapping[str, Any] | None = None
) -> list[tuple[str, int, int]]:
    """(scope, hard, used) of every ResourceQuota limiting ``requests.nvidia.com/gpu`` that
    applies to pods of ``spec`` (its ``scopes`` / ``scopeSelector``); scope =
    ``<namespace>/<name>`` plus its scopes, the identity releases are credited under."""
    out = []
    for q in quotas:
        qspec = q.get("spec") or {}
        hard = (qspec.get("hard") or {}).get(QUOTA_KEY)
        if hard is None or (spec is not None and not quota_applies(qspec, spec)):
            continue
        used = ((q.get("status") or {}).get("used") or {}).get(QUOTA_KEY)
        meta = q.get("metadata") or {}
        scope = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}{_scopes_text(qspec)}"
        out.append((scope, pods.quantity(hard), pods.quantity(used)))
    return out


def _scopes_text(qspec: Mapping[str, Any]) -> str:
    parts = list(qspec.get("scopes") or [])
    for e in (qspec.get("scopeSelector") or {}).get("matchExpressions") or []:
        parts.append(f"{e.get('scopeName')} {e.get('operator')} {','.join(e.get('values') or [])}")
    return f" [{'; '.join(parts)}]" if parts else ""


def quota_applies(qspec: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether a ResourceQuota's ``scopes``/``scopeSelector`` select pods of this spec (the
    quota admission's rules: BestEffort, Terminating = activeDeadlineSeconds, PriorityClass).
    A GPU pod has requests, so it is never BestEffort."""
    terminating = spec.get("activeDeadlineSeconds") is not None
    facts = {
        "BestEffort": False,
        "NotBestEffort": True,
        "Terminating": terminating,
        "NotTerminating": not terminating,
    }
    for s in qspec.get("scopes") or []:
        if not facts.get(str(s), True):
            return False
    for e in (qspec.get("scopeSelector") or {}).get("matchExpressions") or []:
        name, op, values = e.get("scopeName"), e.get("operator"), e.get("values") or []
        if name in facts:
            if facts[name] != (op != "DoesNotExist"):
                return False
        elif name == "PriorityClass":
            pc = spec.get("priorityClassName")
            ok = {
                "In": pc in values,
                "NotIn": pc not in values,
                "Exists": pc is not None,
                "DoesNotExist": pc is None,
            }.get(str(op), True)
            if not ok:
                return False
    return True


def check_quota(
    kube: Kube,
    w: Workload,
    *,
    gpus_per_replica: int,
    delta: int,
    bound_time_sliced: bool,
    credit: int = 0,
    quotas: Sequence[Obj] | None = None,
) -> QuotaStatus:
    """Read-only: do ``delta`` more replicas fit the namespace's GPU quota? (``QuotaRefused``)

    ``credit``: GPUs counted in ``used`` that the start itself frees first (the exclusive
    holder of the deploy's reservations, handed over; R-GPS-8: a reservation counts its GPUs
    once, by its holder or by its deploy's pods).

    ``quotas``: the namespace's ResourceQuotas from the watch cache (None: one LIST now). The
    API server's quota admission enforces the quota itself on every pod create, so a preflight
    on a cached ``used`` never lets a pod exceed it: decision "The alias guard and the quota
    preflight read the watch cache"."""
    requested = 0 if bound_time_sliced else max(delta, 0) * gpus_per_replica
    project = w.labels.get(names.PROJECT) or None
    if quotas is None:
        quotas = kube.items(
            kube.core.list_namespaced_resource_quota,
            w.namespace,
            what=f"list resourcequotas in {w.namespace}",
        )
    limits = gpu_quotas(quotas, w.template.get("spec") or {})
    if not limits:
        return QuotaStatus(project=project, quota=None, used=0, requested=requested)
    scope, hard, used = min(limits, key=lambda x: x[1] - x[2])
    used = max(used - credit, 0)
    if used + requested > hard:
        raise QuotaRefused(
            f"ResourceQuota {scope}: {used} {QUOTA_KEY} used + {requested} requested > hard {hard}",
            project=project,
            quota=hard,
            used=used,
            requested=requested,
            scope=scope,
        )
    return QuotaStatus(project=project, quota=hard, used=used, requested=requested, scope=scope)


def alias_services(services: Sequence[Obj]) -> dict[tuple[str, str], list[str]]:
    """(namespace, deploy id) → names of the Services that are its aliases."""
    out: dict[tuple[str, str], list[str]] = {}
    for s in services:
        meta = s.get("metadata") or {}
        target = (meta.get("labels") or {}).get(names.ALIAS_OF)
        if target:
            out.setdefault((meta.get("namespace", ""), target), []).append(str(meta.get("name")))
    return out


def list_alias_services(kube: Kube, namespace: str) -> list[Obj]:
    return kube.items(
        kube.core.list_namespaced_service,
        namespace,
        label_selector=names.ALIAS_OF,
        what=f"list alias services in {namespace}",
    )


def merged_aliases(w: Workload, by_target: Mapping[tuple[str, str], list[str]]) -> tuple[str, ...]:
    found = [*annotation_aliases(w), *sorted(by_target.get((w.namespace, w.deploy_id), []))]
    return tuple(dict.fromkeys(found))


def guarded_aliases(
    kube: Kube, w: Workload, *, services: Sequence[Obj] | None = None
) -> tuple[str, ...]:
    """The alias guard's read, failing closed (never "no alias" on an error). ``services``:
    the namespace's alias Services from the watch cache (None: one LIST now, its errors
    refusing the guard)."""
    if services is not None:
        return merged_aliases(w, alias_services(services))
    try:
        services = list_alias_services(kube, w.namespace)
    except CoreError as exc:
        if getattr(exc, "http_status", None) in (401, 403):
            raise AliasGuardUnavailable(
                "unwired",
                f"the adapter may not list Services in {w.namespace} ({exc}); grant it "
                "list on services, the alias guard needs them",
            ) from exc
        raise AliasGuardUnavailable(
            "read_error", f"alias Services of {w.deploy_id} unreadable: {exc}"
        ) from exc
    return merged_aliases(w, alias_services(services))


def hpa_list(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.items(
        kube.autoscaling.list_namespaced_horizontal_pod_autoscaler,
        namespace,
        what=f"list horizontalpodautoscalers in {namespace}",
    )
