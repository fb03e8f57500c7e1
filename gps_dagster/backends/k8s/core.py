"""``K8sCore``: the ``Core`` port on a real Kubernetes cluster, through the official client.

Reads find the workload by its deploy-id label and derive the view from it and its pods
(``views``). A mutation is one merge patch of the workload, built from a fresh read:

1. the key is looked up in the workload's ledger — found: the earlier operation is returned and
   nothing is written (a resubmit after a lost answer mutates at most once);
2. the caller's ETag is compared with the one just read (``EtagMismatch`` if stale);
3. the core's own admission decides (``mutations``, quota, billing, reservation budget);
4. the change and the new ledger entry are written together, preconditioned on the
   resourceVersion of step 1's read; a 409 (someone wrote in between) re-reads and retries only
   if the deploy's intent is unchanged, else it is the caller's ``EtagMismatch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from gps_dagster.backends.k8s import (
    accounts,
    capacity,
    inventory,
    ledger,
    mutations,
    names,
    pods,
    views,
)
from gps_dagster.backends.k8s import gps as gps_mod
from gps_dagster.backends.k8s.accounts import BillingCheck, NamespaceBilling
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.gps import Binding, Reservations
from gps_dagster.backends.k8s.mutations import Plan
from gps_dagster.backends.k8s.workloads import (
    Finder,
    Workload,
    patch,
    read,
    selector_matches,
    selector_string,
)
from gps_dagster.domain.gps.admission import Admitted
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.ports import (
    AdmissionPreview,
    AdmissionRefused,
    AliasInfo,
    CapacityPreview,
    Clock,
    DeployState,
    DeployView,
    EtagMismatch,
    NotFound,
    Operation,
    OperationKind,
    OperationState,
    Permanent,
    QuotaStatus,
    WitnessResult,
)

CONFLICT_RETRIES = 3
REFUSED = {
    OperationKind.STOP: "stop_failed",
    OperationKind.START: "start_failed",
    OperationKind.SET_REPLICA_INTENT: "scale_failed",
}
"""Reason of a mutation the API server refused (its own message follows)."""
LWS_RECHECK_S = 300.0


@dataclass
class Snapshot:
    """Pods, alias Services and HPAs of some namespaces, read once for many views."""

    pods: list[Obj] = field(default_factory=list)
    services: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    hpa: set[tuple[str, str, str]] = field(default_factory=set)


class K8sCore:
    """The deployment control plane on Kubernetes (SPEC §11)."""

    def __init__(
        self,
        kube: Kube,
        *,
        clock: Clock,
        namespaces: Sequence[str] = (),
        store_engine: Engine | None = None,
        billing: BillingCheck | None = None,
        policy_namespace: str = names.POLICY_NAMESPACE,
    ) -> None:
        self.kube, self.clock, self.namespaces = kube, clock, tuple(namespaces)
        self.billing: BillingCheck = billing or NamespaceBilling()
        self.gps = Reservations(kube, store_engine, policy_namespace=policy_namespace)
        self._lws_checked = -LWS_RECHECK_S
        self._finder = Finder(kube, self.namespaces, lws=False)

    @property
    def finder(self) -> Finder:
        """Workload lookup; whether the LWS API is served is re-checked every few minutes."""
        if time.monotonic() - self._lws_checked >= LWS_RECHECK_S:
            self._finder = Finder(self.kube, self.namespaces, lws=self.kube.has_lws())
            self._lws_checked = time.monotonic()
        return self._finder

    # -- reads -------------------------------------------------------------------------------------

    def _snapshot(
        self, namespaces: set[str], *, selector: dict[str, Any] | None = None
    ) -> Snapshot:
        snap = Snapshot()
        for ns in sorted(namespaces):
            query = {"label_selector": selector_string(selector)} if selector else {}
            snap.pods += self.kube.items(
                self.kube.core.list_namespaced_pod, ns, what=f"list pods in {ns}", **query
            )
            snap.services.update(
                accounts.alias_services(accounts.list_alias_services(self.kube, ns))
            )
            snap.hpa |= views.hpa_targets(accounts.hpa_list(self.kube, ns))
        return snap

    def _binding(self, w: Workload) -> Binding | None:
        return gps_mod.binding(w, views.gpus_per_replica(w, None))

    def _view(self, w: Workload, snap: Snapshot) -> DeployView:
        own = [
            p
            for p in snap.pods
            if pods.namespace(p) == w.namespace and selector_matches(w.selector, pods.labels(p))
        ]
        b = self._binding(w)
        view = views.deploy_view(
            w,
            own,
            aliases=accounts.merged_aliases(w, snap.services),
            hpa=(w.namespace, w.kind, w.name) in snap.hpa,
            binding=gps_mod.binding_view(b),
        )
        if isinstance(b, TimeSlicedBinding) and view.state is DeployState.READY:
            self.gps.drop_holder(b)  # a member runs again: the GPU group no longer needs the holder
        return view

    def _view_one(self, w: Workload) -> DeployView:
        return self._view(w, self._snapshot({w.namespace}, selector=dict(w.selector)))

    def get_deploy(self, deploy_id: str) -> DeployView:
        return self._view_one(self.finder.find(deploy_id))

    def get_deploys(self, deploy_ids: Sequence[str]) -> dict[str, DeployView]:
        found = self.finder.find_many(deploy_ids)
        snap = self._snapshot({w.namespace for w in found.values()})
        return {i: self._view(w, snap) for i, w in found.items()}

    def list_members(self, endpoint_id: str) -> tuple[DeployView, ...]:
        found = sorted(
            self.finder.managed(f"{names.ENDPOINT}={endpoint_id}"), key=lambda w: w.deploy_id
        )
        if not found:
            raise NotFound(
                f"no CMP endpoint {endpoint_id!r} (no workload labelled {names.ENDPOINT}={endpoint_id})"
            )
        snap = self._snapshot({w.namespace for w in found})
        return tuple(self._view(w, snap) for w in found)

    def reservation_deploys(self, reservation_id: str) -> tuple[DeployView, ...]:
        found = sorted(
            (
                w
                for w in self.finder.all_labelled()
                if gps_mod.bound_to(self._binding(w), reservation_id)
            ),
            key=lambda w: w.deploy_id,
        )
        snap = self._snapshot({w.namespace for w in found})
        return tuple(self._view(w, snap) for w in found)

    def holding_pods(self) -> list[pods.Pod]:
        """Every pod bound to a node and not terminal, cluster-wide (they hold node GPUs)."""
        found = self.kube.items(
            self.kube.core.list_pod_for_all_namespaces,
            what="list bound pods",
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
        )
        return pods.holding(found)

    def nodes(self) -> list[Obj]:
        return self.kube.items(self.kube.core.list_node, what="list nodes")

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        w = self.finder.find(deploy_id)
        b = self._binding(w)
        gpr = views.gpus_per_replica(w, gps_mod.binding_view(b))
        if b is not None:
            return self.gps.capacity(b, gpr, max(delta_replicas, 0), self.holding_pods())
        return capacity.preview(
            w.template.get("spec") or {},
            gpus_per_replica=gpr,
            nodes_per_replica=w.group_size,
            delta=delta_replicas,
            nodes=self.nodes(),
            holding=self.holding_pods(),
        )

    def alias_guard(self, deploy_id: str) -> AliasInfo:
        w = self.finder.find(deploy_id)
        return AliasInfo(deploy_id, accounts.guarded_aliases(self.kube, w))

    def check_quota(self, deploy_id: str, *, delta_replicas: int) -> QuotaStatus:
        w = self.finder.find(deploy_id)
        b = self._binding(w)
        return self._quota(w, b, delta_replicas)

    def _quota(self, w: Workload, b: Binding | None, delta: int) -> QuotaStatus:
        gpr = views.gpus_per_replica(w, gps_mod.binding_view(b))
        return accounts.check_quota(
            self.kube,
            w,
            gpus_per_replica=gpr,
            delta=delta,
            bound_time_sliced=isinstance(b, TimeSlicedBinding),
        )

    def check_billing(self, deploy_id: str) -> None:
        self.billing(self.kube, self.finder.find(deploy_id))

    def get_operation(self, op_id: str) -> Operation:
        ref = ledger.parse_operation_id(op_id)
        w = read(self.kube, ref.kind, ref.namespace, ref.name)
        if ref.noop is not None:
            return self._live_noop(w, *ref.noop)
        found = next((e for e in ledger.read(w).entries if e.seq == ref.seq), None)
        if found is None:
            raise NotFound(f"no operation {op_id!r} in the ledger of {w.ref}")
        return self._live(w, found)

    def _done(self, kind: str, view: DeployView) -> bool:
        if kind == OperationKind.STOP.value:
            return view.converged_stopped
        return (
            view.state is DeployState.READY
            and view.ready_replicas == view.desired_replicas
            and view.terminating_pods == 0
        )

    def _live_noop(self, w: Workload, kind: OperationKind, key: str) -> Operation:
        done = self._done(kind.value, self._view_one(w))
        state = OperationState.DONE if done else OperationState.ACCEPTED
        return ledger.noop_operation(w, kind, key, at=self.clock.now(), state=state)

    def _live(self, w: Workload, e: ledger.Entry) -> Operation:
        if e.state != OperationState.ACCEPTED.value:
            return ledger.to_operation(w, e, OperationState(e.state))
        if any(x.seq > e.seq for x in ledger.read(w).entries):
            return ledger.to_operation(w, e, OperationState.SUPERSEDED)
        done = self._done(e.kind, self._view_one(w))
        return ledger.to_operation(w, e, OperationState.DONE if done else OperationState.ACCEPTED)

    # -- read-back for operators ------------------------------------------------------------------

    def describe(self, deploy_id: str) -> dict[str, Any]:
        """Conditions, Warning events (the API's own words) and pods of one deploy."""
        return inventory.describe(self.kube, self.finder.find(deploy_id))

    def inventory(self) -> inventory.Inventory:
        """GPU nodes, what each holds, and the GPU pods still waiting (``pool show``)."""
        return inventory.cluster_inventory(self.kube, self.namespaces)

    # -- reservations (SPEC §8) ----------------------------------------------------------------------

    def _members(self) -> list[tuple[Workload, Binding | None, int]]:
        return [
            (m, self._binding(m), gps_mod.ready_groups(m.status))
            for m in self.finder.all_labelled()
        ]

    def admission_preview(
        self, deploy_id: str, *, delta_replicas: int, releasing: Sequence[str] = ()
    ) -> AdmissionPreview:
        w = self.finder.find(deploy_id)
        b = self._binding(w)
        decision = (
            self.gps.decide(w, b, self._members(), releasing=set(releasing))
            if b is not None
            else None
        )
        return self.gps.preview(w, decision)

    def witness(self, deploy_id: str) -> WitnessResult:
        w = self.finder.find(deploy_id)
        snap = self._snapshot({w.namespace}, selector=dict(w.selector))
        return gps_mod.witness(
            w, [p for p in snap.pods if selector_matches(w.selector, pods.labels(p))]
        )

    # -- mutations -----------------------------------------------------------------------------------

    def stop(
        self, deploy_id: str, *, etag: str, allow_aliased_downtime: bool, idempotency_key: str
    ) -> Operation:
        def plan(w: Workload) -> Plan:
            aliases = () if allow_aliased_downtime else accounts.guarded_aliases(self.kube, w)
            out = mutations.stop(w, aliases=aliases, allow_aliased_downtime=allow_aliased_downtime)
            b = self._binding(w)
            if out.mutating and isinstance(
                b, TimeSlicedBinding
            ):  # R-GPS-6: holder before the last goes
                running = [
                    m.deploy_id
                    for m, mb, ready in self._members()
                    if ready > 0 and m.replicas > 0 and gps_mod.bound_to(mb, b.reservation)
                ]
                self.gps.ensure_holder(w, b, running)
            return out

        return self._mutate(OperationKind.STOP, deploy_id, etag, idempotency_key, plan)

    def start(self, deploy_id: str, *, etag: str, idempotency_key: str) -> Operation:
        def plan(w: Workload) -> Plan:
            mutations.refuse_broken(w)
            self.billing(self.kube, w)
            if w.replicas > 0:
                return mutations.NOTHING
            b = self._binding(w)
            self._quota(w, b, views.desired_replicas(w))
            template = self.gps.rendered_template(w, b) if b is not None else None
            return mutations.start(w, template=template)

        return self._mutate(OperationKind.START, deploy_id, etag, idempotency_key, plan)

    def set_replica_intent(
        self, deploy_id: str, replicas: int, *, etag: str, idempotency_key: str
    ) -> Operation:
        def plan(w: Workload) -> Plan:
            hpa = (w.namespace, w.kind, w.name) in views.hpa_targets(
                accounts.hpa_list(self.kube, w.namespace)
            )
            b = self._binding(w)
            mutations.check_scalable(
                w, replicas, hpa=hpa, time_sliced=isinstance(b, TimeSlicedBinding)
            )
            if 0 < w.replicas < replicas:
                self.billing(self.kube, w)
                self._quota(w, b, replicas - w.replicas)
            return mutations.set_replica_intent(w, replicas)

        return self._mutate(
            OperationKind.SET_REPLICA_INTENT,
            deploy_id,
            etag,
            idempotency_key,
            plan,
            replicas=replicas,
        )

    def _key_elsewhere(self, key: str, w: Workload) -> Workload | None:
        for other in self.finder.all_labelled():
            if other.uid != w.uid and ledger.read(other).by_key(key) is not None:
                return other
        return None

    def _mutate(
        self,
        kind: OperationKind,
        deploy_id: str,
        etag: str,
        key: str,
        plan_fn: Callable[[Workload], Plan],
        *,
        replicas: int | None = None,
    ) -> Operation:
        w = self.finder.find(deploy_id)
        for _ in range(CONFLICT_RETRIES):
            led = ledger.read(w)
            seen = led.by_key(key)
            if seen is not None:
                return self._replay(w, seen, kind, key)
            other = self._key_elsewhere(key, w)
            if other is not None:
                raise Permanent(
                    f"idempotency key {key!r} was used for {other.deploy_id}",
                    reason="idempotency_key_reused",
                )
            current = ledger.etag(w, led)
            if etag != current:
                raise EtagMismatch(f"{deploy_id}: etag {etag} is stale (current {current})")
            try:
                return self._apply(kind, w, led, key, plan_fn, replicas)
            except EtagMismatch:
                w = self.finder.find(deploy_id)  # a write landed between our read and our patch
        raise EtagMismatch(
            f"{deploy_id} kept changing under {kind.value} ({CONFLICT_RETRIES} conflicts)"
        )

    def _replay(self, w: Workload, seen: ledger.Entry, kind: OperationKind, key: str) -> Operation:
        if seen.kind != kind.value:
            raise Permanent(
                f"idempotency key {key!r} was used for {seen.kind} {w.deploy_id}",
                reason="idempotency_key_reused",
            )
        return self._live(w, seen)

    def _apply(
        self,
        kind: OperationKind,
        w: Workload,
        led: ledger.Ledger,
        key: str,
        plan_fn: Callable[[Workload], Plan],
        replicas: int | None,
    ) -> Operation:
        """Plan and write; a time-sliced member's start both under its reservation's row lock."""
        b = self._binding(w)
        if (
            kind is not OperationKind.START
            or not isinstance(b, TimeSlicedBinding)
            or w.replicas > 0
        ):
            return self._write(kind, w, led, key, plan_fn(w), replicas)
        with self.gps.locked(b.reservation) as rsv:
            decision = self.gps.decide(w, b, self._members(), rsv=rsv)
            if decision is not None and not isinstance(decision, Admitted):
                raise AdmissionRefused(
                    decision.reason, f"{w.deploy_id} on reservation '{rsv.id}': {decision.fix}"
                )
            return self._write(kind, w, led, key, plan_fn(w), replicas)

    def _write(
        self,
        kind: OperationKind,
        w: Workload,
        led: ledger.Ledger,
        key: str,
        plan: Plan,
        replicas: int | None,
    ) -> Operation:
        if not plan.mutating:
            return self._live_noop(w, kind, key)
        new, entry = ledger.append(
            w,
            led,
            key=key,
            kind=kind,
            at=self.clock.now(),
            spec_changes=plan.spec_changes,
            replicas=replicas,
            persist_only=plan.persist_only,
        )
        annotations = {**plan.annotations, names.OPERATIONS: ledger.dump(new)}
        body: Obj = {
            "metadata": {"resourceVersion": w.resource_version, "annotations": annotations}
        }
        if plan.spec:
            body["spec"] = plan.spec
        try:
            patched = patch(self.kube, w, body)
        except (EtagMismatch, NotFound):
            raise
        except Permanent as exc:
            raise Permanent(
                f"{kind.value} of {w.deploy_id} refused by the API server: {exc}",
                reason=REFUSED[kind],
            ) from exc
        return self._live(patched, entry)
