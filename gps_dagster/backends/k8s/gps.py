"""GPU reservations on Kubernetes (R-K8S-5, R-GPS): binding, render, admission, holder, witness.

* A deploy's **binding** is the annotation ``gps.dagster.io/reservation`` (the pool file's shape:
  ``{"mode": "exclusive", "reservations": [...]}`` or ``{"mode": "time_sliced", "reservation": R,
  "memory_mib": N}``); the reservations themselves are the store's ledger (the one source of truth).
* **Render** (Track S, ``domain.render.kai``) is applied to the pod template when a bound deploy
  starts: scheduler name from the scheduling-policy ConfigMap, queue derived from the project,
  node pinned to the reservation's node, ``gpu-memory`` for a time-sliced member.
* **Admission** of a time-sliced member (R-GPS-3) runs under the reservation's row lock in the
  store, so two engines cannot both take the last MiB.
* **Holder** (R-GPS-6): stopping the last running member of a time-sliced reservation first
  creates the minimal holder pod; it is deleted once a member is ready again.
* **Exclusive holder** (R-GPS-2): an ACTIVE exclusive reservation that no bound deploy wants is
  held by a pod requesting its GPUs on its node (``kai.render_exclusive_holder_pod``), so the
  schedulers and the kubelet count them taken. Created by the fenced writes only: before a
  bound deploy's stop (``before_stop``) and before any unbound start (``hold_idle``: hold before
  lending); deleted by the bound deploy's start (``hand_over``), right before its patch.
* **Witness** (R-GPS-7, R-K8S-5): the UUIDs of each ready replica group, from the node agent's
  ``gps.dagster.io/container.<c>.gpus.devices`` on its pods (the kubelet's PodResources record,
  ``nodeagent``); no NVIDIA component writes GPU UUIDs onto a Pod, so nothing else is read.
"""

# Decisions embodied here (docs/decisions.md):
# * “A reservation's scope is its namespace, for every mode; the queue is the reservation's”
# * “`GPS_WITNESS_SOURCE` (`node_agent` | `none`), refused before anything moves”
# * “The node agent's heartbeat is a stamp on the pods it publishes”
# * “The reservation ledger lock is taken where the guarded write is, through the ledger port”
# * “A write rests on the watch cache's copy; its resourceVersion is the check”
# * “The holder pods of a start are looked up in the watch cache”

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.bindings import (
    Binding,
    Member,
    Members,
    bound_to,
    check_scope,
    queue_project,
)
from gps_dagster.backends.k8s.pods import Pod
from gps_dagster.backends.k8s.renders import (
    exclusive_template,
    is_holder,
    keep_template_metadata,
    pod_reservations,
)
from gps_dagster.backends.k8s.witness import WITNESS_NODE_AGENT, WITNESS_NONE, WITNESS_UNAVAILABLE
from gps_dagster.backends.k8s.workloads import Workload
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.admission import Admitted, Decision, Ineligible, Overcommitted, admit
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.gps.errors import ReservationNotFound
from gps_dagster.domain.gps.holders import exclusive_holder_wanted, holder_wanted
from gps_dagster.domain.gps.reservations import (
    Reservation,
    ReservationState,
    SharingMode,
    format_mib,
)
from gps_dagster.domain.render import kai
from gps_dagster.ports import (
    AdmissionPreview,
    AdmissionRefused,
    CapacityPreview,
    CoreError,
    Fits,
    Insufficient,
    NotFound,
    ReservationLedger,
)


class Reservations:
    """The adapter's GPS side: the store's ledger plus the cluster objects it drives."""

    def __init__(
        self,
        kube: Kube,
        ledger: ReservationLedger | None,
        *,
        policy_namespace: str = names.POLICY_NAMESPACE,
        witness_source: str = WITNESS_NODE_AGENT,
        cached_pods: Callable[[str | None], list[Obj] | None] | None = None,
    ) -> None:
        """``cached_pods``: the watch cache's pods of a namespace (None: every namespace), None
        from it meaning "read directly" — where the holder pods are looked up."""
        self.kube, self.ledger, self.policy_namespace = kube, ledger, policy_namespace
        self.witness_source = witness_source
        self.cached_pods = cached_pods
        self.pinned: dict[str, Reservation] = {}
        """Reservations read under their row lock by the running admission (no second read)."""

    def get(self, reservation_id: str) -> Reservation:
        if reservation_id in self.pinned:
            return self.pinned[reservation_id]
        if self.ledger is None:
            raise NotFound(
                f"reservation {reservation_id!r}: no reservation ledger (store) is wired"
            )
        try:
            return self.ledger.get(reservation_id)
        except ReservationNotFound as exc:
            raise NotFound(str(exc), reason="unknown_reservation") from exc

    # -- admission (R-GPS-3) -----------------------------------------------------------------------

    def decide(
        self,
        w: Workload,
        b: Binding | None,
        members: Sequence[Member],
        *,
        releasing: Collection[str] = (),
        rsv: Reservation | None = None,
    ) -> Decision | None:
        """The VRAM decision for starting ``w``; None when no budget applies (unbound, exclusive).

        ``members`` are (workload, binding, ready groups) of the deploys in scope.
        """
        unwitnessed = self.witness_refusal(b)
        if unwitnessed is not None:
            return unwitnessed
        if isinstance(b, ExclusiveBinding):
            return self._scope_decision(w, b.reservations)
        if not isinstance(b, TimeSlicedBinding):
            return None
        try:
            rsv = rsv or self.get(b.reservation)
        except NotFound:
            return Ineligible(
                b.reservation,
                "unknown_reservation",
                f"reservation '{b.reservation}' is not in the ledger",
            )
        out_of_scope = self._scope_decision(w, (rsv.id,), rsv)
        if out_of_scope is not None:
            return out_of_scope
        running: dict[str, int] = {}
        flying: dict[str, int] = {}
        for mw, mb, ready in members:
            if (
                mw.deploy_id in releasing
                or not isinstance(mb, TimeSlicedBinding)
                or mb.reservation != rsv.id
            ):
                continue
            if mw.replicas > 0:
                (running if ready > 0 else flying)[mw.deploy_id] = mb.memory_mib
        return admit(rsv, running=running, in_flight=flying, proposed=(w.deploy_id, b.memory_mib))

    def witness_refusal(self, b: Binding | None) -> Ineligible | None:
        """A bound deploy cannot start where nothing can witness its placement (R-K8S-5): its
        convergence would wait for a witness forever, so it is refused before anything moves."""
        if b is None or self.witness_source != WITNESS_NONE:
            return None
        rid = b.reservation if isinstance(b, TimeSlicedBinding) else b.reservations[0]
        return Ineligible(
            rid,
            WITNESS_UNAVAILABLE,
            "no placement witness source is configured (GPS_WITNESS_SOURCE=none): install the "
            "chart's node agent (nodeAgent.enabled=true; it reads the kubelet's PodResources API "
            "or dcgm-exporter) and set GPS_WITNESS_SOURCE=node_agent, or unbind the deploy",
        )

    def require_witness(self, w: Workload, b: Binding | None) -> None:
        """``witness_refusal`` at start: raises ``AdmissionRefused`` with the fix."""
        refused = self.witness_refusal(b)
        if refused is not None:
            raise AdmissionRefused(
                refused.reason,
                f"{w.deploy_id} on reservation '{refused.reservation_id}': {refused.fix}",
            )

    def _scope_decision(
        self, w: Workload, reservation_ids: Sequence[str], rsv: Reservation | None = None
    ) -> Ineligible | None:
        """The preflight's form of ``check_scope``: refused before anything is released."""
        for rid in reservation_ids:
            try:
                check_scope(w, rsv if rsv is not None else self.get(rid))
            except NotFound:
                continue  # the render and the capacity preview report an unknown reservation
            except AdmissionRefused as exc:
                return Ineligible(rid, exc.reason, str(exc))
        return None

    def preview(self, w: Workload, decision: Decision | None) -> AdmissionPreview:
        if decision is None:
            return AdmissionPreview(w.deploy_id, True)
        if isinstance(decision, Admitted):
            return AdmissionPreview(
                w.deploy_id,
                True,
                decision.reservation_id,
                None,
                f"fits: {format_mib(decision.total_mib)} of {format_mib(decision.budget_mib)} MiB",
                decision.budget_mib,
            )
        message = f"{w.deploy_id} on reservation '{decision.reservation_id}': {decision.fix}"
        if isinstance(decision, Overcommitted):
            return AdmissionPreview(
                w.deploy_id,
                False,
                decision.reservation_id,
                decision.reason,
                message,
                decision.budget_mib,
                decision.running_mib,
                decision.in_flight_mib,
                decision.proposed_mib,
            )
        return AdmissionPreview(
            w.deploy_id, False, decision.reservation_id, decision.reason, message
        )

    def locked(self, reservation_id: str) -> Any:
        """The ledger's transaction holding the reservation's row lock (admission serialises on
        it)."""
        if self.ledger is None:
            raise AdmissionRefused(
                "reservation_ledger_unwired", "no reservation ledger (store) is wired"
            )
        return _Locked(self, self.ledger, reservation_id)

    # -- render (R-GPS-5) --------------------------------------------------------------------------

    def policy(self) -> kai.SchedulingPolicy:
        try:
            cm = self.kube.call(
                self.kube.core.read_namespaced_config_map,
                names.POLICY_CONFIGMAP,
                self.policy_namespace,
                what="read the scheduling policy",
            )
        except NotFound as exc:
            raise AdmissionRefused(
                "scheduling_policy_missing",
                f"no ConfigMap {self.policy_namespace}/{names.POLICY_CONFIGMAP}: create it "
                "with at least "
                "scheduler_name (e.g. kai-scheduler) before starting reservation-bound deploys",
            ) from exc
        data = {k: v for k, v in (cm.get("data") or {}).items() if v}
        try:
            return kai.SchedulingPolicy.model_validate(data)
        except ValidationError as exc:
            raise AdmissionRefused(
                "scheduling_policy_invalid", f"{names.POLICY_CONFIGMAP}: {exc}"
            ) from exc

    def rendered_template(self, w: Workload, b: Binding, source: Obj | None = None) -> Obj:
        """A pod template of ``w`` (its main one, or ``source``: an LWS's leader template)
        rendered for its binding (the start patches it in)."""
        policy = self.policy()
        base: Mapping[str, Any] = w.template if source is None else source
        template = {
            "metadata": dict(base.get("metadata") or {}),
            "spec": dict(base.get("spec") or {}),
        }
        if isinstance(b, TimeSlicedBinding):
            out = self._member_template(w, b, template, policy)
        else:
            rsvs = [self.get(r) for r in b.reservations]
            for rsv in rsvs:
                check_scope(w, rsv)
            out = exclusive_template(template, rsvs, project=queue_project(rsvs[0]), policy=policy)
        return keep_template_metadata(template, out)  # both renders: the server's own keys stay

    def _member_template(
        self, w: Workload, b: TimeSlicedBinding, template: Obj, policy: kai.SchedulingPolicy
    ) -> Obj:
        rsv = self.get(b.reservation)
        check_scope(w, rsv)
        try:
            out = kai.render_member_pod(
                template,
                reservation=rsv,
                deploy_id=w.deploy_id,
                project=queue_project(rsv),
                memory_mib=b.memory_mib,
                policy=policy,
            )
        except SpecInvalid as exc:
            raise AdmissionRefused("render_invalid", str(exc)) from exc
        meta = {k: v for k, v in out.manifest["metadata"].items() if k in ("labels", "annotations")}
        return {"metadata": meta, "spec": out.manifest["spec"]}

    # -- holder (R-GPS-6) --------------------------------------------------------------------------

    def ensure_holder(
        self, w: Workload, b: Binding | None, running_members: Collection[str]
    ) -> None:
        """Before stopping a time-sliced member: the holder, if no member will be left running."""
        if not isinstance(b, TimeSlicedBinding):
            return
        rsv = self.get(b.reservation)
        if not holder_wanted(rsv, running=running_members, stopping=[w.deploy_id]):
            return
        pod = kai.render_holder_pod(rsv, project=queue_project(rsv), policy=self.policy())
        try:
            self.kube.call(
                self.kube.core.create_namespaced_pod,
                rsv.namespace,
                pod,
                what="create the holder pod",
                mutating=True,
            )
        except CoreError as exc:
            if "already exists" not in str(exc):
                raise

    def drop_holder(self, b: Binding | None) -> None:
        """A member is ready again: the holder goes (404 = already gone)."""
        if not isinstance(b, TimeSlicedBinding):
            return
        rsv = self.get(b.reservation)
        try:
            self.kube.call(
                self.kube.core.delete_namespaced_pod,
                kai.holder_name(rsv.id),
                rsv.namespace,
                grace_period_seconds=0,
                what="delete the holder pod",
                mutating=True,
            )
        except NotFound:
            return

    # -- exclusive holder (R-GPS-2) ----------------------------------------------------------------

    def before_stop(self, w: Workload, b: Binding | None, members: Members) -> None:
        """Before a bound deploy stops: hold each of its exclusive reservations no other bound
        deploy wants. The holder stays Pending until the kubelet has released the deploy's
        GPUs, then its scheduler binds it there. ``members`` is read only for a bound deploy."""
        if not isinstance(b, ExclusiveBinding):
            return
        scope = members()
        for rid in b.reservations:
            rsv = self.get(rid)
            others = _wanting(rid, scope) - {w.deploy_id}
            if exclusive_holder_wanted(rsv, wanting=others):
                self._create_holder(rsv)

    def hold_idle(self, members: Members) -> None:
        """Before unbound work starts: every idle ACTIVE exclusive reservation of the ledger is
        held, and the holder of a reservation no longer ACTIVE goes. No ledger, or no exclusive
        reservation in it: nothing (and ``members``, a read of every workload, is not made)."""
        if self.ledger is None:
            return
        exclusive = [
            r for r in self.ledger.list(include_released=True) if r.mode is SharingMode.EXCLUSIVE
        ]
        if not exclusive:
            return
        held = {
            (pods.namespace(p), pods.labels(p).get(kai.RESERVATION_LABEL, "")): p
            for p in self._holders()
        }
        scope = members()
        for rsv in exclusive:
            present = (rsv.namespace, rsv.id) in held
            if exclusive_holder_wanted(rsv, wanting=_wanting(rsv.id, scope)):
                if not present:
                    self._create_holder(rsv)
            elif present and rsv.state is not ReservationState.ACTIVE:
                self._delete_holder(rsv)

    def idle_holds(self, holding: Sequence[Pod], members: Members) -> list[Pod]:
        """For a read-only preview of unbound work: the GPUs of each idle ACTIVE exclusive
        reservation whose holder is not bound yet, as the pod the start will hold them with
        (``hold_idle`` runs before any unbound start), so the preview never promises them."""
        reservations = self.ledger.list(include_released=False) if self.ledger else []
        if not reservations:
            return []
        scope = members()
        bound = {
            (pods.namespace(p), pods.labels(p).get(kai.RESERVATION_LABEL, ""))
            for p in holding
            if is_holder(p)
        }
        out: list[Pod] = []
        for rsv in reservations:
            if (rsv.namespace, rsv.id) in bound or not exclusive_holder_wanted(
                rsv, wanting=_wanting(rsv.id, scope)
            ):
                continue
            gpus = str(len(rsv.gpu_uuids))
            out.append(
                {
                    "metadata": {
                        "name": kai.holder_name(rsv.id),
                        "namespace": rsv.namespace,
                        "labels": {kai.ROLE_LABEL: "holder", kai.RESERVATION_LABEL: rsv.id},
                    },
                    "spec": {
                        "nodeName": rsv.node,
                        "containers": [
                            {"name": "holder", "resources": {"requests": {names.GPU: gpus}}}
                        ],
                    },
                    "status": {"phase": "Pending"},
                }
            )
        return out

    def hand_over(self, b: Binding | None) -> None:
        """A bound deploy starts: its reservations' holders go, right before its own patch.

        Both are writes of the one fenced start: the holder is deleted with grace 0 (its pause
        container holds nothing to drain), and the deploy's pods, pinned to the node, are
        created by its controller at once. A pending outside pod could in principle be bound in
        between by another scheduler; the render's ``priority_class_name`` (set above tenant
        work) makes the scheduler serve and, if needed, preempt for the bound pods first."""
        if not isinstance(b, ExclusiveBinding):
            return
        for rid in b.reservations:
            self._delete_holder(self.get(rid))

    def held_gpus(self, namespace: str, b: Binding | None) -> int:
        """GPUs the holders of ``b``'s reservations request in ``namespace`` (quota credit: the
        hand-over frees them before the deploy's pods are created)."""
        if not isinstance(b, ExclusiveBinding):
            return 0
        return sum(
            pods.gpus(p)
            for p in self._holders(namespace)
            if pods.labels(p).get(kai.RESERVATION_LABEL) in b.reservations
        )

    def _holders(self, namespace: str | None = None) -> list[Pod]:
        """The holder pods (of ``namespace``, or everywhere): from the watch cache when it
        answers — a holder the cache has not seen yet is created again and answered "already
        exists", one it still shows after its deletion is deleted again (NotFound is success)."""
        selector = f"{kai.ROLE_LABEL}=holder"
        cached = self.cached_pods(namespace) if self.cached_pods is not None else None
        if cached is not None:
            found: list[Obj] = [p for p in cached if pods.labels(p).get(kai.ROLE_LABEL) == "holder"]
        elif namespace is not None:
            found = self.kube.items(
                self.kube.core.list_namespaced_pod,
                namespace,
                label_selector=selector,
                what="list holder pods",
            )
        else:
            found = self.kube.items(
                self.kube.core.list_pod_for_all_namespaces,
                label_selector=selector,
                what="list holder pods",
            )
        return [p for p in found if pods.gpus(p) > 0 and not pods.terminal(p)]

    def _create_holder(self, rsv: Reservation) -> None:
        pod = kai.render_exclusive_holder_pod(rsv, project=queue_project(rsv), policy=self.policy())
        try:
            self.kube.call(
                self.kube.core.create_namespaced_pod,
                rsv.namespace,
                pod,
                what=f"create the holder pod of {rsv.id}",
                mutating=True,
            )
        except CoreError as exc:
            if "already exists" not in str(exc):
                raise

    def _delete_holder(self, rsv: Reservation) -> None:
        try:
            self.kube.call(
                self.kube.core.delete_namespaced_pod,
                kai.holder_name(rsv.id),
                rsv.namespace,
                grace_period_seconds=0,
                what=f"delete the holder pod of {rsv.id}",
                mutating=True,
            )
        except NotFound:
            return

    # -- capacity and witness (R-GPS-2, R-GPS-7) ---------------------------------------------------

    def capacity(
        self, b: Binding, gpus_per_replica: int, delta: int, holding: Sequence[Pod]
    ) -> CapacityPreview:
        """Capacity of a bound deploy: its reservations' GPUs minus the GPU requests of the pods
        bound to them on their node — counted from requests like the unbound path (R-K8S-4),
        not from device annotations, which appear only once the node agent has seen a pod."""
        if isinstance(b, TimeSlicedBinding):
            rsv = self.get(b.reservation)
            if rsv.state is ReservationState.ACTIVE:
                return Fits(groups=delta)
            return Insufficient("insufficient_capacity", {}, delta, 0)
        free: dict[str, int] = {}
        ours: dict[str, set[str]] = {}
        for rid in b.reservations:
            rsv = self.get(rid)
            if rsv.state is not ReservationState.ACTIVE:
                continue
            free[rsv.node] = free.get(rsv.node, 0) + len(rsv.gpu_uuids)
            ours.setdefault(rsv.node, set()).add(rsv.id)
        for p in holding:
            node = pods.node(p)
            if is_holder(p):  # handed over at the start (``hand_over``)
                continue
            if node in ours and ours[node] & set(pod_reservations(p)):
                free[node] -= pods.gpus(p)
        free = {n: max(v, 0) for n, v in free.items()}
        groups = sum(v // max(gpus_per_replica, 1) for v in free.values())
        if groups >= delta:
            return Fits(groups=delta)
        return Insufficient("insufficient_capacity", dict(sorted(free.items())), delta, groups)


def _wanting(rid: str, members: Sequence[Member]) -> set[str]:
    """The deploys bound to reservation ``rid`` whose spec wants replicas."""
    return {m.deploy_id for m, mb, _ in members if m.replicas > 0 and bound_to(mb, rid)}


class _Locked:
    """The ledger's transaction holding one reservation's row lock; its row is pinned meanwhile."""

    def __init__(self, owner: Reservations, ledger: ReservationLedger, reservation_id: str) -> None:
        self.owner, self.reservation_id = owner, reservation_id
        self._tx = ledger.locked(reservation_id)

    def __enter__(self) -> Reservation:
        try:
            rsv = self._tx.__enter__()
        except ReservationNotFound as exc:
            raise NotFound(str(exc), reason="unknown_reservation") from exc
        self.owner.pinned[rsv.id] = rsv
        return rsv

    def __exit__(self, *exc: Any) -> None:
        self.owner.pinned.pop(self.reservation_id, None)
        self._tx.__exit__(*exc)
