"""The storage seam of the two simulated pools, and the control flow written once over it.

``SimPool`` keeps its rows in SQL tables, ``MemoryPool`` in dicts; what they do with those rows
is the same. Each pool implements the few storage operations a flow below needs (a small
Protocol per flow: ``Timed``, ``Placing``, ``Deploys``, ``Recording``), and the flow itself —
the order of the reads, the checks and the writes — lives here once, beside ``pure``.
"""

# Decisions embodied here (docs/decisions.md):
# * “The in-memory simulated pool shares the simulator's pure pieces”

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from gps_dagster.backends.sim.faults import SimulatedCrash
from gps_dagster.backends.sim.pure import (
    Binding,
    Blocks,
    DeployRow,
    Outcome,
    Topology,
    choose_nodes,
    etag_of,
    names,
    refuse_forced,
    refuse_scale,
)
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.domain.pool import FaultSpec, ForeignSpec
from gps_dagster.ports import (
    AdmissionRefused,
    EtagMismatch,
    Operation,
    OperationKind,
    Permanent,
    QuotaStatus,
    Transient,
)

__all__ = [
    "Deploys",
    "MutatingPool",
    "Placing",
    "Recording",
    "Timed",
    "advance",
    "fire_at",
    "fire_taken",
    "mutate",
    "place_static_foreign",
    "set_replica_intent",
    "start",
    "stop",
]

C = TypeVar("C", contravariant=True)
P = TypeVar("P", bound=Topology, contravariant=True)
R = TypeVar("R")
Op = TypeVar("Op")
T = TypeVar("T", contravariant=True)
Cx = TypeVar("Cx")


# -- one-shot faults --------------------------------------------------------------------------


def fire_taken(hits: Sequence[FaultSpec], op: str) -> None:
    """Fire what the call's taken one-shot faults do before it runs (a failure, an early crash)."""
    for fault in hits:
        if fault.effect == "fail_next":
            err = Transient if fault.error == "transient" else Permanent
            raise err(f"injected failure of {op}", reason="injected")
        if fault.effect == "crash" and fault.point == "before_mutation":
            raise SimulatedCrash(fault.point, op)


def fire_at(hits: Sequence[FaultSpec], op: str, point: str) -> None:
    """Fire the crashes of ``point``; after the commit, a lost response."""
    for fault in hits:
        if fault.effect == "crash" and fault.point == point:
            raise SimulatedCrash(point, op)
    if point == "after_commit" and any(f.effect == "lose_response" for f in hits):
        raise Transient(f"response of {op} lost (the mutation was applied)", reason="response_lost")


# -- time -------------------------------------------------------------------------------------


class Timed(Protocol[C]):
    """How a pool applies the transitions due at an instant and keeps its clock."""

    def next_event(self, ctx: C) -> float | None:
        """The earliest instant a transition is due (None: nothing is)."""
        ...

    def apply_due(self, ctx: C, at: float, blocked: set[str], never_ready: set[str]) -> None:
        """Apply the transitions due at ``at``."""
        ...

    def set_clock(self, ctx: C, target: float, next_at: float | None, *, moved: bool) -> None:
        """Record ``target`` as the pool's now (and ``next_at`` as its next event if ``moved``)."""
        ...


def advance(
    store: Timed[C],
    ctx: C,
    target: float,
    next_at: float | None,
    blocked: set[str],
    never_ready: set[str],
) -> None:
    """Apply every transition due up to ``target``, batch by batch, in time order."""
    moved = False
    while next_at is not None and next_at <= target:
        store.apply_due(ctx, next_at, blocked, never_ready)
        next_at = store.next_event(ctx)
        moved = True
    store.set_clock(ctx, target, next_at, moved=moved)


# -- placement --------------------------------------------------------------------------------


class Placing(Protocol[P]):
    """The free GPUs of a pool and their hand-out."""

    def free_by_node(self, ctx: P) -> dict[str, int]:
        """Published free GPUs per node, outside reservations."""
        ...

    def allocate(
        self, ctx: P, node: str, count: int, holder: str, holder_type: str, grp: int | None
    ) -> None:
        """Hand ``count`` free GPUs of ``node`` to ``holder``."""
        ...


def place_static_foreign(
    store: Placing[P], ctx: P, index: int, fw: ForeignSpec
) -> FieldError | None:
    """Give a static foreign workload of the pool file its GPUs at load; the problem if none fit."""
    free = store.free_by_node(ctx)
    node = fw.node
    if node is None:
        chosen = choose_nodes(ctx, free, fw.flavor, fw.gpus, 1)
        node = chosen[0] if chosen else None
    if node is None or free.get(node, 0) < fw.gpus:
        return FieldError(
            f"sim.foreign[{index}].gpus",
            "initial_overcommit",
            f"'{fw.id}' does not fit; free GPUs or lower gpus",
        )
    store.allocate(ctx, node, fw.gpus, fw.id, "foreign", None)
    return None


# -- operations -------------------------------------------------------------------------------


class Recording(Protocol[C, R, Op, T]):
    """A pool's operation log and deploy rows, as one mutation reads and writes them."""

    def seen(self, ctx: C, key: str) -> Op | None:
        """The operation recorded under idempotency ``key``, if any."""
        ...

    def row(self, ctx: C, deploy_id: str) -> R:
        """The deploy's row (``NotFound`` if there is none)."""
        ...

    def record(
        self,
        ctx: C,
        kind: OperationKind,
        deploy_id: str,
        key: str,
        replicas: int | None,
        outcome: T,
    ) -> Op:
        """Record the accepted operation (its number, its ETag after the change)."""
        ...

    def settle(self, ctx: C) -> None:
        """Write the pool's bookkeeping after a change (next event, revision, usage)."""
        ...

    def live(self, ctx: C, op: Op, *, latest: bool) -> Operation:
        """The operation as the pool reports it now (``latest``: just recorded)."""
        ...

    def origin(self, op: Op) -> tuple[str, str]:
        """The deploy and the kind ``op`` was recorded for."""
        ...

    def version(self, row: R) -> int:
        """The deploy row's version (its ETag's number)."""
        ...


def mutate(
    store: Recording[C, R, Op, T],
    ctx: C,
    kind: OperationKind,
    deploy_id: str,
    etag: str,
    key: str,
    replicas: int | None,
    apply: Callable[[R], T],
) -> Operation:
    """One mutation inside the pool's write: a replayed key answers its operation (a key reused
    for another call is refused), a stale ETag is refused, else ``apply`` and record it."""
    seen = store.seen(ctx, key)
    if seen is not None:
        # A replay mutates nothing, but the faults it consumed still fire: a retry can lose its
        # answer too.
        seen_deploy, seen_kind = store.origin(seen)
        if seen_deploy != deploy_id or seen_kind != kind.value:
            raise Permanent(
                f"idempotency key {key!r} was used for {seen_kind} {seen_deploy}",
                reason="idempotency_key_reused",
            )
        return store.live(ctx, seen, latest=False)
    row = store.row(ctx, deploy_id)
    current = etag_of(deploy_id, store.version(row))
    if etag != current:
        raise EtagMismatch(f"{deploy_id}: etag {etag} is stale (current {current})")
    outcome = apply(row)
    op = store.record(ctx, kind, deploy_id, key, replicas, outcome)
    store.settle(ctx)
    return store.live(ctx, op, latest=True)


# -- what a mutation does to the deploy ---------------------------------------------------------


class Deploys(Protocol[C]):
    """A pool's deploy rows and replica groups, as stop, start and a replica intent change them.

    A row is read as the call found it (``pure.DeployRow``); ``write`` makes the change."""

    def binding(self, ctx: C, deploy_id: str) -> Binding | None:
        """The deploy's reservation binding, if it has one."""
        ...

    def write(self, ctx: C, row: DeployRow, *, applied: bool, **values: object) -> None:
        """Set ``values`` on the deploy, bump its version and generation (``applied``: the
        generation is applied at once)."""
        ...

    def add_groups(self, ctx: C, row: DeployRow, first: int, count: int) -> None:
        """``count`` pending replica groups numbered from ``first``."""
        ...

    def remove_groups(self, ctx: C, row: DeployRow, count: int) -> None:
        """Scale down by ``count`` groups (pending first, then the youngest), their GPUs freed."""
        ...

    def remove_all_groups(self, ctx: C, row: DeployRow) -> None:
        """Every group of the deploy gone, its GPUs released."""
        ...

    def place(self, ctx: C, row: DeployRow, blocks: Blocks) -> None:
        """Place the deploy's pending groups now (what fits)."""
        ...

    def check_billing(self, ctx: C, row: DeployRow) -> None: ...

    def check_quota(self, ctx: C, row: DeployRow, *, delta_replicas: int) -> QuotaStatus: ...

    def admit_start(self, ctx: C, row: DeployRow) -> None:
        """The VRAM admission of a time-sliced member's start."""
        ...

    def detach_member(self, ctx: C, deploy_id: str) -> None: ...

    def sync_holders(self, ctx: C) -> None:
        """Keep each time-sliced group alive: a holder iff no member is ready."""
        ...


def stop(
    store: Deploys[C], ctx: C, row: DeployRow, *, allow_aliased_downtime: bool, blocks: Blocks
) -> Outcome:
    if row.id in blocks.fail_stop:
        raise Permanent(f"stop of {row.id} failed", reason="stop_failed")
    if row.forced_state == "DELETING":
        raise AdmissionRefused("deploy_deleting", f"{row.id} is being deleted")
    if names(row.aliases) and not allow_aliased_downtime:
        raise AdmissionRefused(
            "alias_requires_consent", f"{row.id} has an alias; pass allow_aliased_downtime=True"
        )
    if not row.running:
        return Outcome(changed=False)
    store.remove_all_groups(ctx, row)
    if isinstance(store.binding(ctx, row.id), TimeSlicedBinding):
        store.detach_member(ctx, row.id)
        store.sync_holders(ctx)  # the holder arrives in the same call the last member leaves
    store.write(ctx, row, applied=True, running=False)
    return Outcome(changed=True)


def start(store: Deploys[C], ctx: C, row: DeployRow, *, blocks: Blocks) -> Outcome:
    if row.id in blocks.fail_start:
        raise Permanent(f"start of {row.id} failed", reason="start_failed")
    refuse_forced(row)
    store.check_billing(ctx, row)
    if row.running:
        return Outcome(changed=False)
    store.check_quota(ctx, row, delta_replicas=row.desired)
    store.admit_start(ctx, row)
    store.add_groups(ctx, row, row.next_grp, row.desired)
    store.write(ctx, row, applied=False, running=True, next_grp=row.next_grp + row.desired)
    store.place(ctx, row, blocks)
    return Outcome(changed=True)


def set_replica_intent(
    store: Deploys[C], ctx: C, row: DeployRow, replicas: int, *, blocks: Blocks
) -> Outcome:
    refuse_scale(row, replicas, store.binding(ctx, row.id))
    roles = {"desired": replicas, "role_min": replicas, "role_max": replicas}
    if not row.running:
        store.write(ctx, row, applied=True, **roles)
        return Outcome(changed=True, persist_only=True)
    delta = replicas - row.desired
    if delta > 0:
        store.check_billing(ctx, row)
        store.check_quota(ctx, row, delta_replicas=delta)
        store.add_groups(ctx, row, row.next_grp, delta)
        store.write(ctx, row, applied=False, next_grp=row.next_grp + delta, **roles)
        store.place(ctx, row, blocks)
    else:
        store.remove_groups(ctx, row, -delta)
        store.write(ctx, row, applied=True, **roles)
    return Outcome(changed=True)


# -- the Core port's mutations ----------------------------------------------------------------


class MutatingPool(Generic[Cx, R, Op]):
    """``stop``, ``start`` and ``set_replica_intent`` of the ``Core`` port, written once: each
    call's one-shot faults are taken first, the mutation runs inside the pool's write, and the
    faults of ``before_commit`` / ``after_commit`` fire around its end. A pool supplies its
    write, its one-shot faults, its ``Recording`` and its ``Deploys``."""

    _deploys: Deploys[Cx]

    def _one_shots(self, op: str, deploy: str | None) -> list[FaultSpec]:
        raise NotImplementedError

    def _write(self, hits: list[FaultSpec]) -> AbstractContextManager[tuple[Cx, Blocks]]:
        raise NotImplementedError

    def _log(self) -> Recording[Cx, R, Op, Outcome]:
        raise NotImplementedError

    def stop(
        self, deploy_id: str, *, etag: str, allow_aliased_downtime: bool, idempotency_key: str
    ) -> Operation:
        return self._mutate(
            OperationKind.STOP,
            deploy_id,
            etag,
            idempotency_key,
            None,
            lambda ctx, row, b: stop(
                self._deploys, ctx, row, allow_aliased_downtime=allow_aliased_downtime, blocks=b
            ),
        )

    def start(self, deploy_id: str, *, etag: str, idempotency_key: str) -> Operation:
        return self._mutate(
            OperationKind.START,
            deploy_id,
            etag,
            idempotency_key,
            None,
            lambda ctx, row, b: start(self._deploys, ctx, row, blocks=b),
        )

    def set_replica_intent(
        self, deploy_id: str, replicas: int, *, etag: str, idempotency_key: str
    ) -> Operation:
        return self._mutate(
            OperationKind.SET_REPLICA_INTENT,
            deploy_id,
            etag,
            idempotency_key,
            replicas,
            lambda ctx, row, b: set_replica_intent(self._deploys, ctx, row, replicas, blocks=b),
        )

    def _mutate(
        self,
        kind: OperationKind,
        deploy_id: str,
        etag: str,
        key: str,
        replicas: int | None,
        apply: Callable[[Cx, R, Blocks], Outcome],
    ) -> Operation:
        hits = self._one_shots(kind.value, deploy_id)
        with self._write(hits) as (ctx, blocks):
            result = mutate(
                self._log(),
                ctx,
                kind,
                deploy_id,
                etag,
                key,
                replicas,
                lambda row: apply(ctx, row, blocks),
            )
            fire_at(hits, kind.value, "before_commit")
        fire_at(hits, kind.value, "after_commit")
        return result
