"""``K8sCore``: the ``Core`` port on a real Kubernetes cluster, through the official client.

Reads find the workload by its deploy-id label and derive the view from it and its pods
(``views``), in as few list calls as a pass needs (one per kind and namespace). The mutations are
``writes.MutationsMixin``: one merge patch each, preconditioned on the resourceVersion just read,
idempotent by the key recorded on the workload.
"""
# Decisions embodied here (docs/decisions.md):
# * “Cluster-autoscaler events steer the unschedulable grace”
# * “The Kubernetes adapter reads a pass from one watch cache per process”
# * “Kubernetes previews in one batch block count the block's fits”
# * “A read of many deploys lists the scale-up events once per namespace”

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from gps_dagster.backends.k8s import (
    accounts,
    bindings,
    capacity,
    inventory,
    ledger,
    names,
    pods,
    views,
)
from gps_dagster.backends.k8s.accounts import BillingCheck, NamespaceBilling
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.bindings import Binding
from gps_dagster.backends.k8s.cache import ClusterCache
from gps_dagster.backends.k8s.gps import Reservations
from gps_dagster.backends.k8s.sessions import PreviewSessions
from gps_dagster.backends.k8s.witness import WITNESS_NODE_AGENT
from gps_dagster.backends.k8s.witness import witness as witness_of
from gps_dagster.backends.k8s.workloads import (
    LWS,
    Finder,
    Workload,
    read,
    selector_matches,
    selector_string,
)
from gps_dagster.backends.k8s.writes import WRITE_CONCURRENCY, MutationsMixin
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.ports import (
    AdmissionPreview,
    AliasInfo,
    CapacityPreview,
    Clock,
    CoreError,
    DeployState,
    DeployView,
    Fits,
    Insufficient,
    NotFound,
    Operation,
    OperationKind,
    OperationState,
    QuotaStatus,
    ReservationLedger,
    WitnessResult,
)

LWS_RECHECK_S = 300.0


@dataclass
class Snapshot:
    """Pods, alias Services and HPAs of some namespaces, read once for many views."""

    pods: list[Obj] = field(default_factory=list)
    every_pod: bool = True
    """Whether ``pods`` holds every pod of the namespaces (else only a workload's)."""
    services: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    hpa: set[tuple[str, str, str]] = field(default_factory=set)
    events: dict[str, list[Obj] | None] = field(default_factory=dict)
    """Scale-up events by namespace, read on the first unschedulable view of each: an
    oversubscribed pool's read of many deploys lists them once per namespace, not per deploy."""
    _by_label: dict[tuple[str, str, str], list[Obj]] | None = field(
        default=None, repr=False, compare=False
    )

    def selected(self, namespace: str, selector: Mapping[str, Any]) -> list[Obj]:
        """The pods of ``namespace`` ``selector`` selects. A selector with ``matchLabels`` is
        answered from an index of the pods by (namespace, label, value), built on the first call
        (``pods`` is complete by then: views read a snapshot once it is made), then checked in
        full: a batch's views cost its deploys' own pods, not every pod once per deploy."""
        match = selector.get("matchLabels") or {}
        if not match:
            candidates = [p for p in self.pods if pods.namespace(p) == namespace]
        else:
            if self._by_label is None:
                self._by_label = {}
                for p in self.pods:
                    ns = pods.namespace(p)
                    for k, v in pods.labels(p).items():
                        self._by_label.setdefault((ns, k, v), []).append(p)
            key, value = next(iter(sorted(match.items())))
            candidates = self._by_label.get((namespace, key, str(value)), [])
        return [p for p in candidates if selector_matches(selector, pods.labels(p))]


SCALE_UP_EVENTS = {"TriggeredScaleUp": "triggered", "NotTriggerScaleUp": "not_triggered"}
"""cluster-autoscaler's Normal events on a pending pod (kubernetes/autoscaler
``cluster-autoscaler/processors/status/eventing_scale_up_processor.go``): "pod triggered
scale-up: [...]" and "pod didn't trigger scale-up: [...]". Karpenter does not emit them."""


def scale_up_events(kube: Kube, namespace: str) -> list[Obj] | None:
    """The cluster-autoscaler's scale-up events on the pods of ``namespace`` (two LISTs, one per
    reason); None when events are unreadable (RBAC: the unschedulable grace decides, as without).

    Not from the watch cache: events are a busy cluster's fastest-churning kind (kube-apiserver
    keeps them ``--event-ttl``, 1 h by default: kubernetes/kubernetes#124836) and only these two
    reasons matter; a read of many deploys lists them once per namespace (``Snapshot.events``)."""
    found: list[Obj] = []
    try:
        for reason in SCALE_UP_EVENTS:
            found += kube.items(
                kube.core.list_namespaced_event,
                namespace,
                field_selector=f"involvedObject.kind=Pod,reason={reason}",
                what=f"list {reason} events in {namespace}",
            )
    except CoreError:
        return None
    return found


def autoscaler_verdict(events: Sequence[Obj] | None, own: Sequence[Obj]) -> str | None:
    """The newest scale-up event of any unschedulable pod of the deploy, as ``DeployView.scale_up``:
    ``not_triggered`` wins over ``triggered`` (one pod no node group can fit is enough)."""
    waiting = {pods.name(p) for p in own if pods.unschedulable(p)}
    newest: dict[str, tuple[str, str]] = {}
    for e in events or ():
        reason = str(e.get("reason", ""))
        if reason in SCALE_UP_EVENTS:
            pod = str((e.get("involvedObject") or {}).get("name", ""))
            at = str(e.get("lastTimestamp") or e.get("eventTime") or "")
            if pod in waiting and at >= newest.get(pod, ("", ""))[0]:
                newest[pod] = (at, SCALE_UP_EVENTS[reason])
    said = {verdict for _, verdict in newest.values()}
    return "not_triggered" if "not_triggered" in said else ("triggered" if said else None)


def _owned_by(w: Workload, pod: pods.Pod) -> bool:
    """A pod of ``w`` itself (its namespace, its selector): not a competitor of its own start."""
    return pods.namespace(pod) == w.namespace and selector_matches(w.selector, pods.labels(pod))


def replica_group(w: Workload) -> list[Obj]:
    """The pod templates of one replica group, one per pod: an LWS's leader (its own template
    when it has one) then ``size - 1`` workers; a Deployment's one pod."""
    if w.kind != LWS:
        return [dict(w.template)]
    lwt = (w.raw.get("spec") or {}).get("leaderWorkerTemplate") or {}
    leader = lwt.get("leaderTemplate") or w.template
    return [dict(leader), *(dict(w.template) for _ in range(w.group_size - 1))]


class K8sCore(MutationsMixin):
    """The deployment control plane on Kubernetes (R-K8S)."""

    def __init__(
        self,
        kube: Kube,
        *,
        clock: Clock,
        namespaces: Sequence[str] = (),
        ledger: ReservationLedger | None = None,
        billing: BillingCheck | None = None,
        policy_namespace: str = names.POLICY_NAMESPACE,
        witness_source: str = WITNESS_NODE_AGENT,
        write_concurrency: int = WRITE_CONCURRENCY,
        cache: ClusterCache | None = None,
    ) -> None:
        """``cache``: the process's watch cache (``build_core`` starts one); None reads every
        collection from the API server on each call."""
        self.kube, self.clock, self.namespaces = kube, clock, tuple(namespaces)
        self.write_concurrency = max(1, write_concurrency)
        self.billing: BillingCheck = billing or NamespaceBilling()
        self.gps = Reservations(
            kube,
            ledger,
            policy_namespace=policy_namespace,
            witness_source=witness_source,
            cached_pods=cache.pods if cache is not None else None,
        )
        self.cache = cache
        self.sessions = PreviewSessions()
        self._lws_checked = -LWS_RECHECK_S
        self._finder = Finder(kube, self.namespaces, lws=False, source=cache)

    @property
    def finder(self) -> Finder:
        """Workload lookup; whether the LWS API is served is re-checked every few minutes."""
        if time.monotonic() - self._lws_checked >= LWS_RECHECK_S:
            self._finder = Finder(
                self.kube, self.namespaces, lws=self.kube.has_lws(), source=self.cache
            )
            self._lws_checked = time.monotonic()
        return self._finder

    # -- reads -------------------------------------------------------------------------------------

    def _snapshot(
        self, namespaces: set[str], *, selector: dict[str, Any] | None = None
    ) -> Snapshot:
        snap = Snapshot(every_pod=selector is None)
        cache = self.cache
        for ns in sorted(namespaces):
            cached = cache.pods(ns) if cache is not None else None
            if cached is not None:
                snap.pods += (
                    [p for p in cached if selector_matches(selector, pods.labels(p))]
                    if selector
                    else cached
                )
            else:
                query = {"label_selector": selector_string(selector)} if selector else {}
                snap.pods += self.kube.items(
                    self.kube.core.list_namespaced_pod, ns, what=f"list pods in {ns}", **query
                )
            services = cache.services(ns) if cache is not None else None
            if services is None:
                services = accounts.list_alias_services(self.kube, ns)
            snap.services.update(accounts.alias_services(services))
            hpas = cache.hpas(ns) if cache is not None else None
            snap.hpa |= views.hpa_targets(
                hpas if hpas is not None else accounts.hpa_list(self.kube, ns)
            )
        return snap

    def _binding(self, w: Workload) -> Binding | None:
        if not w.annotations.get(names.RESERVATION):
            return None  # unbound: no template to parse (``_members`` asks of every workload)
        return bindings.binding(w, views.gpus_per_replica(w, None))

    def _view(self, w: Workload, snap: Snapshot) -> DeployView:
        own = snap.selected(w.namespace, w.selector)
        view = views.deploy_view(
            w,
            own,
            aliases=accounts.merged_aliases(w, snap.services),
            hpa=(w.namespace, w.kind, w.name) in snap.hpa,
            binding=bindings.binding_view(self._binding(w)),
        )
        if view.unschedulable:
            if w.namespace not in snap.events:
                snap.events[w.namespace] = scale_up_events(self.kube, w.namespace)
            view = replace(view, scale_up=autoscaler_verdict(snap.events[w.namespace], own))
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
                f"no CMP endpoint {endpoint_id!r} (no workload labelled "
                f"{names.ENDPOINT}={endpoint_id})"
            )
        snap = self._snapshot({w.namespace for w in found})
        return tuple(self._view(w, snap) for w in found)

    def reservation_deploys(self, reservation_id: str) -> tuple[DeployView, ...]:
        found = sorted(
            (
                w
                for w in self.finder.all_labelled()
                if bindings.bound_to(self._binding(w), reservation_id)
            ),
            key=lambda w: w.deploy_id,
        )
        snap = self._snapshot({w.namespace for w in found})
        return tuple(self._view(w, snap) for w in found)

    def holding_pods(self) -> list[pods.Pod]:
        """Every pod bound to a node and not terminal, cluster-wide (they hold node GPUs)."""
        cached = self.cache.pods() if self.cache is not None else None
        if cached is not None:
            return pods.holding([p for p in cached if pods.node(p) and not pods.terminal(p)])
        found = self.kube.items(
            self.kube.core.list_pod_for_all_namespaces,
            what="list bound pods",
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
        )
        return pods.holding(found)

    def nodes(self) -> list[Obj]:
        cached = self.cache.nodes() if self.cache is not None else None
        if cached is not None:
            return cached
        return self.kube.items(self.kube.core.list_node, what="list nodes")

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        w = self.finder.find(deploy_id)
        b = self._binding(w)
        gpr = views.gpus_per_replica(w, bindings.binding_view(b))
        if b is not None:
            return self.gps.capacity(b, gpr, max(delta_replicas, 0), self.holding_pods())
        group = replica_group(w)
        shaped = capacity.shape(group, self.nodes(), delta_replicas)
        if isinstance(shaped, Insufficient):
            return shaped
        requests_of = self.cache.requests_of if self.cache is not None else capacity.parse_requests
        spec = w.template.get("spec") or {}
        key = (shaped.key, capacity.queue_rank(spec))
        world = self.sessions.world(key)
        if world is not None and any(_owned_by(w, p) for p in world.pending):
            world = None  # its queue holds this deploy's own pods: not this deploy's world
        if world is None:
            holding = self.holding_pods()
            pending = self.pending_pods()
            others = [p for p in pending if not _owned_by(w, p)]
            world = capacity.world_for(
                shaped.usable,
                holding + self.gps.idle_holds(holding, self._members),
                [p for p in others if (p.get("status") or {}).get("nominatedNodeName")],
                [  # the block's earlier fits are served before this one too
                    *capacity.queued_ahead(others, spec),
                    *self.sessions.taken(),
                ],
                requests_of,
            )
            if len(others) == len(pending):  # none of its own left out: valid for the others
                self.sessions.keep(key, world)
        out = capacity.place(
            world,
            group,
            shaped,
            namespace=w.namespace,
            delta=delta_replicas,
            requests_of=requests_of,
        )
        if isinstance(out, Fits):
            self.sessions.took(
                group,
                namespace=w.namespace,
                replicas=delta_replicas,
                deploy_id=deploy_id,
                world=key,
            )
        return out

    @contextmanager
    def batch(self) -> Iterator[None]:
        """``BatchingCore``: previews of this thread inside the block count the block's earlier
        fits as taken (``sessions.py``). Every call is otherwise exactly as outside a block:
        mutations are each their own preconditioned write, durable when it returns."""
        with self.sessions.block():
            yield

    def previews_count_fits(self) -> bool:
        """Unbound previews count the block's fits; a reservation-bound preview is answered
        from its reservation's GPUs, which the engine never previews together (the batch
        sends bound acquires one at a time)."""
        return True

    def pending_pods(self) -> list[Obj]:
        """Pods not bound to a node yet: a nominated one (a preemptor) has its node promised;
        the others are in the scheduler's queue and take freed capacity in its order."""
        cached = self.cache.pods() if self.cache is not None else None
        if cached is not None:
            return [
                p
                for p in cached
                if not pods.node(p) and (p.get("status") or {}).get("phase") == "Pending"
            ]
        return self.kube.items(
            self.kube.core.list_pod_for_all_namespaces,
            what="list pending pods",
            field_selector="spec.nodeName=,status.phase=Pending",
        )

    def alias_guard(self, deploy_id: str) -> AliasInfo:
        w = self.finder.find(deploy_id)
        return AliasInfo(deploy_id, self._aliases(w))

    def _aliases(self, w: Workload) -> tuple[str, ...]:
        """The alias guard's read: the watch cache's alias Services when it answers (bounded
        staleness, as every cached read), else one LIST; failing closed either way."""
        cached = self.cache.services(w.namespace) if self.cache is not None else None
        return accounts.guarded_aliases(self.kube, w, services=cached)

    def _hpas(self, namespace: str) -> list[Obj]:
        cached = self.cache.hpas(namespace) if self.cache is not None else None
        return cached if cached is not None else accounts.hpa_list(self.kube, namespace)

    def check_quota(self, deploy_id: str, *, delta_replicas: int) -> QuotaStatus:
        w = self.finder.find(deploy_id)
        b = self._binding(w)
        return self._quota(w, b, delta_replicas)

    def _quota(self, w: Workload, b: Binding | None, delta: int, *, credit: int = 0) -> QuotaStatus:
        gpr = views.gpus_per_replica(w, bindings.binding_view(b))
        return accounts.check_quota(
            self.kube,
            w,
            quotas=self.cache.quotas(w.namespace) if self.cache is not None else None,
            gpus_per_replica=gpr,
            delta=delta,
            bound_time_sliced=isinstance(b, TimeSlicedBinding),
            credit=credit,
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
        """Conditions, Warning events (the API's own words) and pods of one deploy; with the
        watch cache, its mode and age (``cache``)."""
        story = inventory.describe(self.kube, self.finder.find(deploy_id))
        story["cache"] = self.cache_state()
        return story

    def cache_state(self) -> dict[str, Any]:
        """The watch cache's mode and age per kind (``mode: direct`` without one)."""
        if self.cache is None:
            return {"mode": "direct", "age_s": None, "kinds": {}}
        return self.cache.describe()

    def close(self) -> None:
        """Stop the watch cache's informers (the process is done with this core)."""
        if self.cache is not None:
            self.cache.stop()

    def subscribe(self, callback: Callable[[frozenset[str]], None]) -> bool:
        """``callback`` gets the deploy ids watch events concern (the engine loop's wake-up);
        False when there is no watch cache to wake it."""
        if self.cache is None:
            return False
        self.cache.subscribe(callback)
        return True

    def metrics_text(self) -> str:
        """This process's adapter gauges (the watch cache's age and mode), Prometheus text."""
        return self.cache.metrics_text() if self.cache is not None else ""

    def inventory(self) -> inventory.Inventory:
        """GPU nodes, what each holds, and the GPU pods still waiting (``pool show``)."""
        cache = self.cache
        return inventory.cluster_inventory(
            self.kube,
            self.namespaces,
            nodes=cache.nodes() if cache is not None else None,
            every_pod=cache.pods() if cache is not None else None,
        )

    # -- reservations (R-GPS) --------------------------------------------------------------------

    def release_holder(self, deploy_id: str) -> None:
        """A time-sliced member is ready again: its reservation's holder pod goes (R-GPS-6).

        Called only by the engine's converge of the start that readied the member (fenced by the
        store, gated on ``enforce``): reads never write (R-K8S-7). Gone already is success.
        """
        self.gps.drop_holder(self._binding(self.finder.find(deploy_id)))

    def _members(self) -> list[tuple[Workload, Binding | None, int]]:
        return [
            (m, self._binding(m), bindings.ready_groups(m.status))
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
        return witness_of(
            w,
            [p for p in snap.pods if selector_matches(w.selector, pods.labels(p))],
            now=self.clock.now(),
        )
