"""The mutations of ``K8sCore``: one preconditioned merge patch each, idempotent by key.

Every mutation starts from a fresh read of the workload:

1. the key is looked up in the workload's ledger — found: the earlier operation is returned and
   nothing is written (a resubmit after a lost answer mutates at most once); a key already used on
   another workload is refused;
2. the caller's ETag is compared with the one just read (``EtagMismatch`` if stale);
3. the core's own admission decides (``mutations``, quota, billing, reservation budget — a
   time-sliced member's start under its reservation's row lock);
4. the change and the new ledger entry are written together, preconditioned on the
   resourceVersion of step 1's read; a 409 (someone wrote in between) re-reads and retries only
   if the deploy's intent is unchanged, else it is the caller's ``EtagMismatch``.

``submit_many`` runs many of these at once on a small thread pool (``write_concurrency``
workers): each is exactly the single-write protocol above (its own read, precondition and ledger
entry in the same patch), so concurrency changes only how long a storm of writes takes. The
client's rate limiter (``ratelimit``) is shared by the workers: concurrency never raises the QPS.
"""

# Decisions embodied here (docs/decisions.md):
# * “Scaling stays one patch of the workload, not `deployments/scale`”
# * “An idle exclusive reservation is held by a pod; its deploy's start hands it over (R-GPS-2)”
# * “A write's idempotency-key check reads the cache's ledger-key index”
# * “A write rests on the watch cache's copy; its resourceVersion is the check”

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from gps_dagster.backends.k8s import bindings, ledger, mutations, names, views
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.mutations import Plan
from gps_dagster.backends.k8s.workloads import (
    CACHE_KINDS,
    DEPLOYMENT,
    LWS,
    Finder,
    Workload,
    from_object,
    patch,
    read,
)
from gps_dagster.domain.gps.admission import Admitted
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.ports import (
    AdmissionRefused,
    Clock,
    EtagMismatch,
    NotFound,
    Operation,
    OperationKind,
    Permanent,
    QuotaStatus,
    Submission,
    submit_one,
)

if TYPE_CHECKING:
    from gps_dagster.backends.k8s.accounts import BillingCheck
    from gps_dagster.backends.k8s.bindings import Binding
    from gps_dagster.backends.k8s.gps import Reservations

CONFLICT_RETRIES = 3
WRITE_CONCURRENCY = 8
"""Default workers of ``submit_many``: enough to hide a remote API server's round trip (a storm
of 1,000 writes at 20 ms each is 20 s one by one, ~2.5 s on 8), few enough to stay a polite
client behind the rate limiter and API Priority and Fairness."""
REFUSED = {
    OperationKind.STOP: "stop_failed",
    OperationKind.START: "start_failed",
    OperationKind.SET_REPLICA_INTENT: "scale_failed",
}
"""Reason of a mutation the API server refused (its own message follows)."""


class _Unconfirmed(Exception):
    """A write's decision made on the watch cache's copy that no request will check: made
    again on a read from the API server (``_fresh``)."""


def _plan(plan_fn: Callable[[Workload], Plan], w: Workload, cached: bool) -> Plan:
    """``plan_fn(w)``; a refusal of the cache's copy is ``_Unconfirmed`` (decided again)."""
    try:
        return plan_fn(w)
    except Permanent:
        if cached:
            raise _Unconfirmed from None
        raise


class MutationsMixin:
    """``stop``, ``start``, ``set_replica_intent`` of ``K8sCore`` (which provides the reads)."""

    kube: Kube
    clock: Clock
    billing: BillingCheck
    gps: Reservations
    write_concurrency: int = WRITE_CONCURRENCY

    if TYPE_CHECKING:

        @property
        def finder(self) -> Finder: ...
        def _binding(self, w: Workload) -> Binding | None: ...
        def _members(self) -> list[tuple[Workload, Binding | None, int]]: ...
        def _quota(
            self, w: Workload, b: Binding | None, delta: int, *, credit: int = 0
        ) -> QuotaStatus: ...
        def _live(self, w: Workload, e: ledger.Entry) -> Operation: ...
        def _live_noop(self, w: Workload, kind: OperationKind, key: str) -> Operation: ...
        def _aliases(self, w: Workload) -> tuple[str, ...]: ...
        def _hpas(self, namespace: str) -> list[Obj]: ...

    def stop(
        self, deploy_id: str, *, etag: str, allow_aliased_downtime: bool, idempotency_key: str
    ) -> Operation:
        def plan(w: Workload) -> Plan:
            aliases = () if allow_aliased_downtime else self._aliases(w)
            out = mutations.stop(w, aliases=aliases, allow_aliased_downtime=allow_aliased_downtime)
            b = self._binding(w)
            if out.mutating and isinstance(
                b, TimeSlicedBinding
            ):  # R-GPS-6: holder before the last goes
                running = [
                    m.deploy_id
                    for m, mb, ready in self._members()
                    if ready > 0 and m.replicas > 0 and bindings.bound_to(mb, b.reservation)
                ]
                self.gps.ensure_holder(w, b, running)
            if out.mutating:  # R-GPS-2: an exclusive reservation left idle is held
                self.gps.before_stop(w, b, self._members)
            return out

        return self._mutate(OperationKind.STOP, deploy_id, etag, idempotency_key, plan)

    def start(self, deploy_id: str, *, etag: str, idempotency_key: str) -> Operation:
        def plan(w: Workload) -> Plan:
            mutations.refuse_broken(w)
            self.billing(self.kube, w)
            if w.replicas > 0:
                return mutations.NOTHING
            b = self._binding(w)
            self._quota(w, b, views.desired_replicas(w), credit=self.gps.held_gpus(w.namespace, b))
            if b is None:
                self.gps.hold_idle(self._members)  # R-GPS-2: hold before lending
                return mutations.start(w, template=None)
            leader = mutations.leader_template(w)
            out = mutations.start(
                w,
                template=self.gps.rendered_template(w, b),
                leader=self.gps.rendered_template(w, b, leader) if leader else None,
            )
            self.gps.hand_over(b)  # the holder goes right before the deploy's own patch
            return out

        return self._mutate(OperationKind.START, deploy_id, etag, idempotency_key, plan)

    def set_replica_intent(
        self, deploy_id: str, replicas: int, *, etag: str, idempotency_key: str
    ) -> Operation:
        def plan(w: Workload) -> Plan:
            hpa = (w.namespace, w.kind, w.name) in views.hpa_targets(self._hpas(w.namespace))
            b = self._binding(w)
            mutations.check_scalable(
                w, replicas, hpa=hpa, time_sliced=isinstance(b, TimeSlicedBinding)
            )
            if 0 < w.replicas < replicas:
                self.billing(self.kube, w)
                self._quota(w, b, replicas - w.replicas)
                if b is None:
                    self.gps.hold_idle(self._members)  # R-GPS-2: hold before lending
            return mutations.set_replica_intent(w, replicas)

        return self._mutate(
            OperationKind.SET_REPLICA_INTENT,
            deploy_id,
            etag,
            idempotency_key,
            plan,
            replicas=replicas,
        )

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        """Each submission's single write, ``write_concurrency`` at a time; results in order."""

        def one(s: Submission) -> Operation | Exception:
            try:
                return submit_one(self, s)  # the mixin holds the whole DeployWrites role
            except Exception as exc:  # this submission's answer
                return exc

        if len(submissions) <= 1 or self.write_concurrency <= 1:
            return [one(s) for s in submissions]
        workers = min(self.write_concurrency, len(submissions))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gps-k8s-write") as pool:
            return list(pool.map(one, submissions))

    def _key_elsewhere(self, key: str, w: Workload) -> Workload | None:
        for other in self._key_holders(key):
            if other.uid != w.uid and ledger.read(other).by_key(key) is not None:
                return other
        return None

    def _key_holders(self, key: str) -> list[Workload]:
        """The workloads whose ledger may record ``key``: the watch cache's ledger-key index
        when it answers for every kind (each candidate's ledger read again by the caller),
        else every labelled workload. The index is as fresh as the cache the scan read."""
        cache = getattr(self, "cache", None)
        if cache is not None:
            out: list[Workload] = []
            for kind in (DEPLOYMENT, LWS) if self.finder.lws else (DEPLOYMENT,):
                found = cache.workloads_with_key(CACHE_KINDS[kind], key)
                if found is None:
                    break
                out += [from_object(kind, o) for o in found]
            else:
                return out
        return self.finder.all_labelled()

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
        cached = getattr(self, "cache", None) is not None
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
            try:
                if etag != current:
                    if cached:  # the cache may trail the caller's read: ask the API server
                        raise _Unconfirmed
                    raise EtagMismatch(f"{deploy_id}: etag {etag} is stale (current {current})")
                return self._apply(kind, w, led, key, plan_fn, replicas, cached=cached)
            except (EtagMismatch, _Unconfirmed):
                w = self._fresh(w)  # a write landed between our read and our patch
                cached = False
        raise EtagMismatch(
            f"{deploy_id} kept changing under {kind.value} ({CONFLICT_RETRIES} conflicts)"
        )

    def _fresh(self, w: Workload) -> Workload:
        """The workload as the API server has it now: read by name (one GET, not a LIST).

        A write's first attempt rests on the watch cache's copy: its patch carries that copy's
        ``resourceVersion``, a precondition the API server checks against the stored object
        (409 Conflict when another write landed, kubernetes/kubernetes#63104), so a cache that
        has not seen the last write costs a retry here, never a lost write. What is not sent to
        the API server — a stale etag, a plan with nothing to write — is decided again on this
        read, not on the cache's (``_Unconfirmed``)."""
        return read(self.kube, w.kind, w.namespace, w.name)

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
        *,
        cached: bool,
    ) -> Operation:
        """Plan and write; a time-sliced member's start both under its reservation's row lock.
        ``cached``: ``w`` is the watch cache's copy (a plan with nothing to write is then
        ``_Unconfirmed``)."""
        b = self._binding(w)
        if kind is OperationKind.START and w.replicas == 0:
            self.gps.require_witness(w, b)
        if (
            kind is not OperationKind.START
            or not isinstance(b, TimeSlicedBinding)
            or w.replicas > 0
        ):
            return self._write(
                kind, w, led, key, _plan(plan_fn, w, cached), replicas, cached=cached
            )
        with self.gps.locked(b.reservation) as rsv:
            decision = self.gps.decide(w, b, self._members(), rsv=rsv)
            if decision is not None and not isinstance(decision, Admitted):
                if cached:
                    raise _Unconfirmed
                raise AdmissionRefused(
                    decision.reason, f"{w.deploy_id} on reservation '{rsv.id}': {decision.fix}"
                )
            return self._write(
                kind, w, led, key, _plan(plan_fn, w, cached), replicas, cached=cached
            )

    def _write(
        self,
        kind: OperationKind,
        w: Workload,
        led: ledger.Ledger,
        key: str,
        plan: Plan,
        replicas: int | None,
        *,
        cached: bool,
    ) -> Operation:
        if not plan.mutating:
            if cached:
                raise _Unconfirmed
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
            spec_patch=plan.spec,
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
