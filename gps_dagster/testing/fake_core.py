"""``FakeCore``: the Core port in memory (dicts, no database), for fast engine tests.

Its fidelity rules (decision "FakeCore is never kinder than the adapters"): the same contract
as the simulator and the Kubernetes adapter (``tests/contract`` runs on it) — ETags per deploy
and never equal across deploys, idempotency keys checked before the ETag (a replay returns the
earlier operation and mutates nothing; a key reused for another deploy or kind is
``idempotency_key_reused``), the same admission (billing, quota, alias consent, scale support),
STOPPED at once with ``terminating_pods`` as the evidence, and capacity published only after
the grace and the lag of ``Timings`` (all zero by default: instant, yet a stop still reports
its terminating pods until the next call at a later instant or the same one). What it does
not model it refuses (GPU reservations: ``NotModelled`` at load), never answers kindly.

Faults come from one ``handler`` (like httpx's ``MockTransport``): it sees every port call as
a ``CoreCall`` and a ``proceed`` thunk; it may raise before proceeding (nothing applied: a
failed call, a crash before the commit), proceed and then raise (a lost response, a crash
after the commit), or return what ``proceed`` returned.
"""

# Decisions embodied here (docs/decisions.md):
# * “FakeCore is never kinder than the adapters”

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar, cast

from gps_dagster.domain.fitting import groups_fitting
from gps_dagster.domain.kinds import scale_refusal
from gps_dagster.domain.pool import PoolSpec, Timings
from gps_dagster.ports import (
    AdmissionPreview,
    AdmissionRefused,
    AliasInfo,
    BillingRefused,
    CapacityPreview,
    Clock,
    Core,
    DeployState,
    DeployView,
    EtagMismatch,
    Fits,
    Insufficient,
    NotFound,
    Operation,
    OperationKind,
    OperationState,
    Permanent,
    QuotaRefused,
    QuotaStatus,
    Submission,
    Unsupported,
    WitnessResult,
    submit_each,
)
from gps_dagster.testing.fake_pool import FakeDeploy, FakeGroup, FakePool

__all__ = ["INSTANT", "CoreCall", "FakeCore", "Handler", "NotModelled", "passthrough"]

T = TypeVar("T")
INSTANT = Timings(stop_grace_s=0, publish_lag_s=0, start_delay_s=0)


@dataclass(frozen=True, slots=True)
class CoreCall:
    """One port call as the handler sees it."""

    method: str
    deploy_id: str | None
    args: Mapping[str, object] = field(default_factory=dict)


Handler = Callable[[CoreCall, Callable[[], object]], object]
"""``handler(call, proceed)``: return ``proceed()`` (or raise, before or after it)."""


def passthrough(call: CoreCall, proceed: Callable[[], object]) -> object:
    return proceed()


class NotModelled(ValueError):
    """The pool asks for something FakeCore does not model (use the simulator)."""


@dataclass
class _Op:
    seq: int
    key: str
    deploy: str
    kind: OperationKind
    replicas: int | None
    persist_only: bool
    etag_after: str
    created_at: datetime


class FakeCore:
    """The whole ``Core`` port over a ``FakePool``; ``handler`` sees every call."""

    def __init__(
        self,
        spec: PoolSpec,
        clock: Clock,
        *,
        timings: Timings | None = None,
        handler: Handler = passthrough,
    ) -> None:
        if spec.reservations or any(d.reservation is not None for d in spec.deploys):
            raise NotModelled("FakeCore does not model GPU reservations")
        if spec.sim.faults:
            raise NotModelled("FakeCore takes faults from its handler, not from the pool file")
        self.clock, self.handler = clock, handler
        self.pool = FakePool(spec.name, timings or INSTANT, now=self._now())
        self.projects = dict(spec.projects)
        self.forced: dict[str, DeployState] = {}
        """Deploys held FAILED or DELETING by the test."""
        self.ops: list[_Op] = []
        self._by_key: dict[str, _Op] = {}
        for node in spec.nodes:
            self.pool.add_node(node.name, node.gpus, node.flavor)
        for i, d in enumerate(spec.deploys):
            running = d.state == "running"
            fd = FakeDeploy(d, i, running, d.replicas, next_group=d.replicas if running else 0)
            fd.groups = {g: FakeGroup() for g in range(d.replicas)} if running else {}
            self.pool.deploys[d.id] = fd
        self.pool.place_pending()
        for fd in self.pool.deploys.values():
            if any(g.state == "pending" for g in fd.groups.values()):
                raise NotModelled(f"running {fd.spec.id!r} does not fit the pool")
            for g in fd.groups.values():
                g.state, g.ready_at = "ready", None
        for f in spec.sim.foreign:
            self.add_foreign(f.id, f.gpus, kind=f.kind, flavor=f.flavor)

    # -- the test's levers ------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _tick(self) -> None:
        self.pool.advance(self._now())

    def add_foreign(
        self, workload_id: str, gpus: int, *, kind: str = "static", flavor: str | None = None
    ) -> None:
        """``static`` takes free GPUs of one node now; ``intruder`` grabs published ones."""
        self._tick()
        if kind == "intruder":
            self.pool.intruders[workload_id] = (gpus, flavor)
            return
        chosen = self.pool.choose_nodes(self.pool.free_by_node(), flavor, gpus, 1)
        if chosen is None:
            raise AdmissionRefused(
                "insufficient_capacity", f"{workload_id}: {gpus} free GPUs not on one node"
            )
        self.pool.allocate(chosen[0], gpus, workload_id, None)

    def remove_foreign(self, workload_id: str) -> None:
        self._tick()
        self.pool.intruders.pop(workload_id, None)
        self.pool.release(workload_id)

    def mutations(self, deploy_id: str) -> int:
        return sum(1 for op in self.ops if op.deploy == deploy_id)

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, method: str, deploy_id: str | None, fn: Callable[[], T], **args: object) -> T:
        def proceed() -> object:
            self._tick()
            return fn()

        return cast(T, self.handler(CoreCall(method, deploy_id, args), proceed))

    def _deploy(self, deploy_id: str) -> FakeDeploy:
        d = self.pool.deploys.get(deploy_id)
        if d is None:
            raise NotFound(f"no deploy {deploy_id!r}")
        return d

    @staticmethod
    def _etag(d: FakeDeploy) -> str:
        return f'W/"{d.spec.id}.{d.version}"'

    def _view(self, d: FakeDeploy) -> DeployView:
        counts: dict[str, int] = {}
        for g in d.groups.values():
            counts[g.state] = counts.get(g.state, 0) + 1
        ready = counts.get("ready", 0)
        if d.spec.id in self.forced:
            state = self.forced[d.spec.id]
        elif not d.running:
            state = DeployState.STOPPED
        elif ready == d.desired == len(d.groups) and d.applied_generation == d.generation:
            state = DeployState.READY
        else:
            state = DeployState.UPDATING if ready else DeployState.STARTING
        s = d.spec
        return DeployView(
            id=s.id,
            kind=s.kind,
            state=state,
            etag=self._etag(d),
            aliases=s.aliases,
            project=s.project,
            cmp_managed=s.project is not None,
            endpoint=s.endpoint,
            gpus_per_replica=s.gpus_per_replica,
            nodes_per_replica=s.nodes_per_replica,
            desired_replicas=d.desired,
            ready_replicas=ready,
            generation=d.generation,
            applied_generation=d.applied_generation,
            terminating_pods=self.pool.terminating_pods(s.id),
            unschedulable=d.running and counts.get("pending", 0) > 0,
            hpa=s.hpa,
            role_min=d.desired,
            role_max=d.desired,
        )

    def _operation(self, op: _Op) -> Operation:
        if op.persist_only:
            state = OperationState.DONE
        elif any(o.seq > op.seq and o.deploy == op.deploy for o in self.ops):
            state = OperationState.SUPERSEDED
        else:
            view = self._view(self._deploy(op.deploy))
            if op.kind is OperationKind.STOP:
                done = view.converged_stopped
            else:
                done = (
                    view.state is DeployState.READY
                    and view.ready_replicas == view.desired_replicas
                    and view.terminating_pods == 0
                )
            state = OperationState.DONE if done else OperationState.ACCEPTED
        return Operation(
            id=f"op-{op.seq:06d}",
            deploy_id=op.deploy,
            kind=op.kind,
            idempotency_key=op.key,
            state=state,
            etag_after=op.etag_after,
            created_at=op.created_at,
            replicas=op.replicas,
            persist_only=op.persist_only,
        )

    # -- DeployReads ------------------------------------------------------------------------

    def get_deploy(self, deploy_id: str) -> DeployView:
        return self._call("get_deploy", deploy_id, lambda: self._view(self._deploy(deploy_id)))

    def get_deploys(self, deploy_ids: Sequence[str]) -> Mapping[str, DeployView]:
        def read() -> dict[str, DeployView]:
            return {
                i: self._view(self.pool.deploys[i]) for i in deploy_ids if i in self.pool.deploys
            }

        return self._call("get_deploys", None, read, deploy_ids=tuple(deploy_ids))

    def get_operation(self, op_id: str) -> Operation:
        def read() -> Operation:
            op = next((o for o in self.ops if f"op-{o.seq:06d}" == op_id), None)
            if op is None:
                raise NotFound(f"no operation {op_id!r}")
            return self._operation(op)

        return self._call("get_operation", None, read, op_id=op_id)

    def list_members(self, endpoint_id: str) -> tuple[DeployView, ...]:
        def read() -> tuple[DeployView, ...]:
            members = [d for d in self.pool.deploys.values() if d.spec.endpoint == endpoint_id]
            if not members:
                raise NotFound(f"no CMP endpoint {endpoint_id!r}")
            return tuple(self._view(d) for d in sorted(members, key=lambda x: x.ordinal))

        return self._call("list_members", None, read, endpoint_id=endpoint_id)

    # -- Preflight --------------------------------------------------------------------------

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        return self._call(
            "preview_capacity",
            deploy_id,
            lambda: self._preview(deploy_id, max(delta_replicas, 0)),
            delta_replicas=delta_replicas,
        )

    def _preview(self, deploy_id: str, delta: int) -> CapacityPreview:
        d, pool = self._deploy(deploy_id), self.pool
        matching = pool.eligible(pool.free_by_node(), d.spec.flavor, d.spec.node_selector)
        if d.spec.flavor is not None and d.spec.flavor not in set(pool.flavors.values()):
            return Insufficient("no_matching_flavor", {}, delta, 0)
        by_flavor: dict[str, list[int]] = {}
        for node, free in matching.items():
            if free >= d.per_node:
                by_flavor.setdefault(pool.flavors[node], []).append(free // d.per_node)
        fitting = sum(
            groups_fitting(slots, d.spec.nodes_per_replica, delta) for slots in by_flavor.values()
        )
        if fitting >= delta:
            return Fits(groups=delta)
        return Insufficient(
            "insufficient_capacity", dict(sorted(matching.items())), delta, min(fitting, delta)
        )

    def alias_guard(self, deploy_id: str) -> AliasInfo:
        return self._call(
            "alias_guard",
            deploy_id,
            lambda: AliasInfo(deploy_id, self._deploy(deploy_id).spec.aliases),
        )

    def check_quota(self, deploy_id: str, *, delta_replicas: int) -> QuotaStatus:
        return self._call(
            "check_quota",
            deploy_id,
            lambda: self._quota(self._deploy(deploy_id), delta_replicas),
            delta_replicas=delta_replicas,
        )

    def _quota(self, d: FakeDeploy, delta_replicas: int) -> QuotaStatus:
        requested = max(delta_replicas, 0) * d.spec.gpus_per_replica
        project = d.spec.project
        if project is None:
            return QuotaStatus(project=None, quota=None, used=0, requested=requested)
        spec = self.projects.get(project)
        quota = spec.gpu_quota if spec is not None else None
        used = sum(
            x.desired * x.spec.gpus_per_replica
            for x in self.pool.deploys.values()
            if x.running and x.spec.project == project
        )
        if quota is not None and used + requested > quota:
            raise QuotaRefused(
                f"project {project}: {used} held + {requested} requested > quota {quota}",
                project=project,
                quota=quota,
                used=used,
                requested=requested,
            )
        return QuotaStatus(project=project, quota=quota, used=used, requested=requested)

    def check_billing(self, deploy_id: str) -> None:
        self._call("check_billing", deploy_id, lambda: self._billing(self._deploy(deploy_id)))

    def _billing(self, d: FakeDeploy) -> None:
        spec = self.projects.get(d.spec.project) if d.spec.project is not None else None
        if spec is not None and spec.billing == "unpaid":
            raise BillingRefused(f"project {d.spec.project} is unpaid", project=d.spec.project)

    def admission_preview(
        self, deploy_id: str, *, delta_replicas: int, releasing: Sequence[str] = ()
    ) -> AdmissionPreview:
        # No reservation exists in a FakeCore pool (refused at load): no VRAM budget applies.
        return self._call(
            "admission_preview",
            deploy_id,
            lambda: AdmissionPreview(self._deploy(deploy_id).spec.id, admitted=True),
            delta_replicas=delta_replicas,
            releasing=tuple(releasing),
        )

    # -- Placement --------------------------------------------------------------------------

    def witness(self, deploy_id: str) -> WitnessResult:
        def read() -> WitnessResult:
            d = self._deploy(deploy_id)
            ready = [grp for grp, g in sorted(d.groups.items()) if g.state == "ready"]
            replicas = tuple(
                tuple(
                    g.uuid
                    for g in self.pool.gpus
                    if g.holder == deploy_id and g.group == grp and g.state == "held"
                )
                for grp in ready
            )
            return WitnessResult(deploy_id, replicas, "fake")

        return self._call("witness", deploy_id, read)

    def reservation_deploys(self, reservation_id: str) -> tuple[DeployView, ...]:
        return self._call("reservation_deploys", None, lambda: (), reservation_id=reservation_id)

    # -- DeployWrites -----------------------------------------------------------------------

    def stop(
        self, deploy_id: str, *, etag: str, allow_aliased_downtime: bool, idempotency_key: str
    ) -> Operation:
        return self._call(
            "stop",
            deploy_id,
            lambda: self._mutate(
                OperationKind.STOP,
                deploy_id,
                etag,
                idempotency_key,
                None,
                lambda d: self._stop(d, allow_aliased_downtime),
            ),
            etag=etag,
            allow_aliased_downtime=allow_aliased_downtime,
            idempotency_key=idempotency_key,
        )

    def start(self, deploy_id: str, *, etag: str, idempotency_key: str) -> Operation:
        return self._call(
            "start",
            deploy_id,
            lambda: self._mutate(
                OperationKind.START, deploy_id, etag, idempotency_key, None, self._start
            ),
            etag=etag,
            idempotency_key=idempotency_key,
        )

    def set_replica_intent(
        self, deploy_id: str, replicas: int, *, etag: str, idempotency_key: str
    ) -> Operation:
        return self._call(
            "set_replica_intent",
            deploy_id,
            lambda: self._mutate(
                OperationKind.SET_REPLICA_INTENT,
                deploy_id,
                etag,
                idempotency_key,
                replicas,
                lambda d: self._scale(d, replicas),
            ),
            replicas=replicas,
            etag=etag,
            idempotency_key=idempotency_key,
        )

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        """One at a time through the single calls: the handler sees each."""
        return submit_each(self, submissions)

    def _mutate(
        self,
        kind: OperationKind,
        deploy_id: str,
        etag: str,
        key: str,
        replicas: int | None,
        apply: Callable[[FakeDeploy], bool],
    ) -> Operation:
        seen = self._by_key.get(key)
        if seen is not None:
            if seen.deploy != deploy_id or seen.kind is not kind:
                raise Permanent(
                    f"idempotency key {key!r} was used for {seen.kind} {seen.deploy}",
                    reason="idempotency_key_reused",
                )
            return self._operation(seen)
        d = self._deploy(deploy_id)
        if etag != self._etag(d):
            raise EtagMismatch(f"{deploy_id}: etag {etag} is stale (current {self._etag(d)})")
        persist_only = apply(d)
        op = _Op(
            len(self.ops) + 1,
            key,
            deploy_id,
            kind,
            replicas,
            persist_only,
            self._etag(d),
            datetime.fromtimestamp(self.pool.now, UTC),
        )
        self.ops.append(op)
        self._by_key[key] = op
        return self._operation(op)

    @staticmethod
    def _bump(d: FakeDeploy, *, applied: bool) -> None:
        d.version += 1
        d.generation += 1
        if applied:
            d.applied_generation = d.generation

    def _refuse_forced(self, d: FakeDeploy) -> None:
        forced = self.forced.get(d.spec.id)
        if forced is DeployState.DELETING:
            raise AdmissionRefused("deploy_deleting", f"{d.spec.id} is being deleted")
        if forced is DeployState.FAILED:
            raise AdmissionRefused("deploy_failed", f"{d.spec.id} is FAILED")

    def _stop(self, d: FakeDeploy, allow_aliased_downtime: bool) -> bool:
        if self.forced.get(d.spec.id) is DeployState.DELETING:
            raise AdmissionRefused("deploy_deleting", f"{d.spec.id} is being deleted")
        if d.spec.aliases and not allow_aliased_downtime:
            raise AdmissionRefused(
                "alias_requires_consent",
                f"{d.spec.id} has an alias; pass allow_aliased_downtime=True",
            )
        if d.running:
            self.pool.release(d.spec.id)
            d.groups.clear()
            d.running = False
            self._bump(d, applied=True)
        return False

    def _start(self, d: FakeDeploy) -> bool:
        self._refuse_forced(d)
        self._billing(d)
        if d.running:
            return False
        self._quota(d, d.desired)
        self._add_groups(d, d.desired)
        d.running = True
        self._bump(d, applied=False)
        self._place(d)
        return False

    def _scale(self, d: FakeDeploy, replicas: int) -> bool:
        if replicas < 1:
            raise AdmissionRefused("replicas_must_be_positive", "use stop for zero replicas")
        refusal = scale_refusal(d.kind, hpa=d.spec.hpa, cmp_endpoint=d.spec.endpoint is not None)
        if refusal:
            raise Unsupported(
                refusal, f"{d.spec.id} ({d.kind}) cannot be scaled by a schedule: {refusal}"
            )
        self._refuse_forced(d)
        if not d.running:
            d.desired = replicas
            self._bump(d, applied=True)
            return True
        delta = replicas - d.desired
        if delta > 0:
            self._billing(d)
            self._quota(d, delta)
            self._add_groups(d, delta)
            d.desired = replicas
            self._bump(d, applied=False)
            self._place(d)
        else:
            order = {"pending": 0, "starting": 1}
            victims = sorted(d.groups, key=lambda g: (order.get(d.groups[g].state, 2), -g))[:-delta]
            self.pool.release(d.spec.id, set(victims))
            for g in victims:
                del d.groups[g]
            d.desired = replicas
            self._bump(d, applied=True)
        return False

    @staticmethod
    def _add_groups(d: FakeDeploy, count: int) -> None:
        for i in range(count):
            d.groups[d.next_group + i] = FakeGroup()
        d.next_group += count

    def _place(self, d: FakeDeploy) -> None:
        if d.spec.id not in self.pool.place_pending():
            self.pool.mark_applied_if_placed(d)


def _holds_the_whole_port(fake: FakeCore) -> Core:
    """Never called: mypy proves here that ``FakeCore`` is a ``Core`` (every role)."""
    return fake
