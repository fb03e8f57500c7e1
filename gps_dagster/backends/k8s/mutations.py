"""What stop, start and set_replica_intent change on a workload, decided before anything is written.

Each function checks the core's own admission (deleting / failed workloads, alias consent, scale
support, billing and quota) and returns a ``Plan``: the spec and annotation changes of the one
merge patch the core then sends, preconditioned on the resourceVersion it read (``core``).

* stop = ``spec.replicas: 0``, remembering the replicas in ``gps.dagster.io/replicas``;
* start = the remembered replicas back (the pod template rendered first for a bound deploy);
* set_replica_intent = replicas and the role floor/ceiling annotations together (R-SCALE-3); on a
  stopped workload only the annotations: persist-only (R-SCALE-5).
A stop of a stopped workload and a start of a running one change nothing (``mutating=False``):
the ledger still records the key, but the ETag stays.
"""

# Decisions embodied here (docs/decisions.md):
# * “A foreign SSA owner of `spec.replicas` is `ineligible{gitops_owned}`”

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.views import desired_replicas, failed
from gps_dagster.backends.k8s.workloads import LWS, Workload, refuse_controlled
from gps_dagster.domain.kinds import scale_refusal
from gps_dagster.ports import AdmissionRefused, Unsupported

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    spec: Obj = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    mutating: bool = True
    persist_only: bool = False
    replicas: int | None = None

    @property
    def spec_changes(self) -> bool:
        return bool(self.spec)


NOTHING = Plan(mutating=False)


GITOPS_MANAGERS = ("argocd-controller", "argocd-application-controller")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def gitops_owner(w: Workload) -> str | None:
    """The field manager that will put ``spec.replicas`` back after we change it, if any.

    * a server-side apply owner (``operation: Apply`` in ``managedFields`` owning
      ``f:spec.f:replicas``) that is not us: Flux's kustomize-controller, Argo CD with
      ServerSideApply, ``kubectl apply --server-side --force-conflicts`` in a loop — each re-apply
      takes the field back;
    * Argo CD's client-side sync (manager ``argocd-controller``, operation Update) when the
      last-applied configuration names ``spec.replicas``: self-heal re-applies it.
    """
    meta = w.raw.get("metadata") or {}
    for entry in meta.get("managedFields") or []:
        owned = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:replicas")
        if owned is not None and entry.get("operation") == "Apply":
            return str(entry.get("manager") or "server-side apply")
    applied = (meta.get("annotations") or {}).get(LAST_APPLIED)
    managers = {str(e.get("manager")) for e in meta.get("managedFields") or []}
    if applied and managers & set(GITOPS_MANAGERS):
        try:
            replicas = (json.loads(applied).get("spec") or {}).get("replicas")
        except (ValueError, AttributeError):
            replicas = None
        if replicas is not None:
            return sorted(managers & set(GITOPS_MANAGERS))[0]
    return None


def refuse_gitops(w: Workload) -> None:
    owner = gitops_owner(w)
    if owner is not None:
        raise Unsupported(
            "gitops_owned",
            f"{w.ref}: spec.replicas is owned by field manager {owner!r}, which reverts every "
            "stop; omit replicas from Git, or ignoreDifferences on /spec/replicas (Argo CD)",
        )


def refuse_deleting(w: Workload) -> None:
    refuse_controlled(w)
    if w.deleting:
        raise AdmissionRefused("deploy_deleting", f"{w.ref} is being deleted")


def refuse_broken(w: Workload) -> None:
    refuse_deleting(w)
    if failed(w):
        raise AdmissionRefused(
            "deploy_failed",
            f"{w.ref} is FAILED (Progressing=False, ProgressDeadlineExceeded); fix its rollout "
            "first",
        )


def stop(w: Workload, *, aliases: tuple[str, ...], allow_aliased_downtime: bool) -> Plan:
    refuse_deleting(w)
    if aliases and not allow_aliased_downtime:
        raise AdmissionRefused(
            "alias_requires_consent",
            f"{w.deploy_id} serves aliases {', '.join(aliases)}; stopping it needs "
            "allow_aliased_downtime=True",
        )
    if w.replicas == 0:
        return NOTHING
    refuse_gitops(w)
    return Plan(spec={"replicas": 0}, annotations={names.REPLICAS: str(w.replicas)})


def start(w: Workload, *, template: Obj | None, leader: Obj | None = None) -> Plan:
    """``template``: the rendered pod template of a bound deploy (None = leave it); ``leader``:
    an LWS's rendered ``leaderTemplate`` (its leader pods are placed by it, not the worker's)."""
    refuse_broken(w)
    if w.replicas > 0:
        return NOTHING
    refuse_gitops(w)
    replicas = desired_replicas(w)
    spec: Obj = {"replicas": replicas}
    if template is not None:
        spec.update(template_patch(w, template))
    if leader is not None and w.kind == LWS:
        diff = merge_diff(leader_template(w), leader)
        if diff:
            spec.setdefault("leaderWorkerTemplate", {})["leaderTemplate"] = diff
    return Plan(spec=spec, replicas=None)


def leader_template(w: Workload) -> Obj | None:
    """An LWS's ``leaderTemplate`` when it has one (else its leaders use the worker template)."""
    if w.kind != LWS:
        return None
    lwt = (w.raw.get("spec") or {}).get("leaderWorkerTemplate") or {}
    found = lwt.get("leaderTemplate")
    return dict(found) if found else None


def check_scalable(w: Workload, replicas: int, *, hpa: bool, time_sliced: bool) -> None:
    if replicas < 1:
        raise AdmissionRefused("replicas_must_be_positive", "use stop for zero replicas")
    refusal = scale_refusal(w.deploy_kind, hpa=hpa, cmp_endpoint=bool(w.labels.get(names.ENDPOINT)))
    if refusal:
        raise Unsupported(refusal, f"{w.ref} cannot be scaled by a schedule: {refusal}")
    refuse_broken(w)
    if time_sliced and replicas != 1:
        raise Unsupported(
            "unsupported_scale_for_mode",
            f"{w.deploy_id} is a time-sliced member: one replica on its reservation's GPU",
        )


def set_replica_intent(w: Workload, replicas: int) -> Plan:
    """Replicas + roles; persist-only on a stopped workload (call ``check_scalable`` first)."""
    roles = {names.ROLE_MIN: str(replicas), names.ROLE_MAX: str(replicas)}
    if w.replicas == 0:
        return Plan(
            annotations={**roles, names.REPLICAS: str(replicas)},
            persist_only=True,
            replicas=replicas,
        )
    spec = {"replicas": replicas} if replicas != w.replicas else {}
    if spec:
        refuse_gitops(w)
    return Plan(spec=spec, annotations=roles, replicas=replicas)


def template_patch(w: Workload, template: Mapping[str, Any]) -> Obj:
    """The spec fragment that turns ``w``'s pod template into ``template`` (a merge patch)."""
    diff = merge_diff(w.template, template)
    if w.kind == LWS:
        return {"leaderWorkerTemplate": {"workerTemplate": diff}} if diff else {}
    return {"template": diff} if diff else {}


def merge_diff(old: Any, new: Any) -> Any:
    """A JSON merge patch from ``old`` to ``new``: removed keys become ``None``, lists replace."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    out: Obj = {}
    for key in old:
        if key not in new:
            out[key] = None
    for key, value in new.items():
        if key not in old:
            out[key] = value
        elif value != old[key]:
            out[key] = merge_diff(old[key], value)
    return out
