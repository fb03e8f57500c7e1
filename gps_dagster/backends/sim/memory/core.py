"""``MemoryPool``: the simulated GPU pool held in memory, an implementation of ``ports.Core``.

``SimPool``'s behaviour without its database: the same timing rules (stop grace,
publish lag, start delay, applied lazily up to the injected clock's ``now``),
placement, projects and quotas, reservations read through the ledger port, foreign
workloads, idempotency keys, ETags, previews, witness, alias guard and faults —
one-shot faults consumed before the call, a ``crash`` before commit leaving nothing
of the call behind. It answers as ``SimPool`` on SQLite does (``batch()`` shares
nothing, so previews do not count earlier fits). One process only: ``simulate``
runs the engine and the pool in one, and pays no SQL transaction per call.
"""

# Decisions embodied here (docs/decisions.md):
# * “The in-memory simulated pool shares the simulator's pure pieces”

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from gps_dagster.backends.sim import seam
from gps_dagster.backends.sim.core import record_reservations
from gps_dagster.backends.sim.faults import applies, deploys_with
from gps_dagster.backends.sim.ledger import Ledger, ledger_of
from gps_dagster.backends.sim.memory import loader, mutations, reserved
from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.driver import MemoryDriver
from gps_dagster.backends.sim.memory.dynamics import (
    advance,
    free_by_node,
    record_usage,
    save_next_event,
)
from gps_dagster.backends.sim.memory.state import DeployRec, OperationRec, PoolState
from gps_dagster.backends.sim.pure import (
    Blocks,
    Outcome,
    names,
    operation_fields,
    settled_state,
    to_operation,
    unbound_preview,
    view_of,
)
from gps_dagster.domain.pool import FaultSpec, PoolSpec
from gps_dagster.ports import (
    AdmissionPreview,
    AliasGuardUnavailable,
    AliasInfo,
    CapacityPreview,
    Clock,
    DeployView,
    NotFound,
    Operation,
    OperationKind,
    QuotaStatus,
    ReservationBook,
    Submission,
    WitnessResult,
    submit_one,
)

__all__ = ["MemoryPool"]

R = TypeVar("R")


def _ts(value: datetime) -> float:
    if value.tzinfo is None:
        raise ValueError("the clock returned a naive datetime")
    return value.timestamp()


class MemoryPool(MemoryDriver, seam.MutatingPool[MemCtx, DeployRec, OperationRec]):
    """A simulated GPU pool in memory (one process), answering exactly as ``SimPool``."""

    _deploys = mutations.DEPLOYS

    def __init__(self, spec: PoolSpec, clock: Clock, ledger: ReservationBook | None = None) -> None:
        """Load ``spec`` at the clock's now; ``ledger``: the reservation ledger (None: no
        reservation known)."""
        self.name, self.clock, self.settings = spec.name, clock, spec.sim
        if spec.reservations:
            if ledger is None:
                raise ValueError(
                    f"pool {spec.name!r} declares reservations: give it a reservation ledger"
                )
            record_reservations(ledger, spec, clock)
        self._source = ledger
        self._flavors = {n.name: n.flavor for n in spec.nodes}
        self._ordinals = {n.name: i for i, n in enumerate(spec.nodes)}
        self._uuids = {u.lower(): u for n in spec.nodes for u in spec.uuids(n)}
        self._bindings = loader.bindings_of(spec)
        self.state: PoolState = loader.load(spec, _ts(clock.now()), self._ledger()).state

    @classmethod
    def create(
        cls, spec: PoolSpec, clock: Clock, *, ledger: ReservationBook | None = None
    ) -> MemoryPool:
        return cls(spec, clock, ledger)

    def _ledger(self) -> Ledger:
        if self._source is None:
            return Ledger()
        held = {r.id: r for r in self._source.list(include_released=False)}
        return ledger_of(held, self._uuids, self._flavors, None)

    # -- calls ----------------------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Nothing shared (``SimPool`` on SQLite): every call of the block is its own."""
        yield

    def previews_count_fits(self) -> bool:
        return False

    def _ctx(self) -> tuple[MemCtx, Blocks]:
        """The call's context, with every transition due up to the clock's now applied."""
        st = self.state
        active = mutations.persistent(st)
        blocks = Blocks(
            unschedulable=deploys_with(active, "unschedulable"),
            never_ready=deploys_with(active, "never_ready"),
            fail_start=deploys_with(active, "fail_start"),
            fail_stop=deploys_with(active, "fail_stop"),
        )
        ctx = MemCtx(
            st,
            self.settings.timings,
            self._flavors,
            self._ordinals,
            st.clock_at,
            self.settings.record_usage,
            active=active,
            read_ledger=self._ledger,
            bindings=self._bindings,
            book=self._source,
        )
        now = max(_ts(self.clock.now()), st.clock_at)
        advance(ctx, now, st.next_event_at, blocks.unschedulable, blocks.never_ready)
        return ctx, blocks

    @contextmanager
    def _tx(self, *, undo: bool = False) -> Iterator[tuple[MemCtx, Blocks]]:
        """A write. ``undo``: on an error, the pool is put back as it was once due transitions were
        applied (what the SQL pool's rollback leaves: those transitions are due anyway). Only a
        call hit by a one-shot fault needs it: otherwise every refusal comes before the first
        write (admission, ETag, idempotency), as in the SQL pool, so nothing is copied per call."""
        ctx, blocks = self._ctx()
        saved = self.state.copy() if undo else None
        try:
            yield ctx, blocks
        except BaseException:
            if saved is not None:
                self.state = saved
            raise

    def _commit_changes(self, ctx: MemCtx) -> None:
        save_next_event(ctx)
        ctx.state.revision += 1
        ctx.state.clock_at = ctx.now
        record_usage(ctx)

    def _one_shots(self, op: str, deploy: str | None) -> list[FaultSpec]:
        hits = mutations.take_faults(self.state, op, deploy)
        seam.fire_taken(hits, op)
        return hits

    def _write(self, hits: list[FaultSpec]) -> AbstractContextManager[tuple[MemCtx, Blocks]]:
        return self._tx(undo=bool(hits))

    def _log(self) -> _Log:
        return _Log(self)

    def _read(self, op: str, deploy: str | None, fn: Callable[[MemCtx], R]) -> R:
        hits = self._one_shots(op, deploy)
        ctx, _b = (
            self._ctx()
        )  # a read that raises keeps the transitions it applied: they are due anyway
        result = fn(ctx)
        seam.fire_at(hits, op, "before_commit")
        seam.fire_at(hits, op, "after_commit")
        return result

    def _row(self, deploy_id: str) -> DeployRec:
        row = self.state.deploys.get(deploy_id)
        if row is None:
            raise NotFound(f"no deploy {deploy_id!r}")
        return row

    def _view(self, ctx: MemCtx, row: DeployRec) -> DeployView:
        groups = ctx.state.groups[row.id]
        counts: dict[str, int] = {}
        for g in groups.values():
            counts[g.state] = counts.get(g.state, 0) + 1
        pods = {(g.grp, g.node) for g in ctx.state.of_holder(row.id) if g.state == "terminating"}
        return view_of(row, counts, len(pods), ctx.bindings.get(row.id))

    def _live(self, ctx: MemCtx, op: OperationRec) -> Operation:
        view = self._view(ctx, self._row(op.deploy))
        superseded = ctx.state.last_seq.get(op.deploy, op.seq) > op.seq
        return to_operation(op, settled_state(op, view, superseded=superseded))

    # -- the Core port: reads --------------------------------------------------------------

    def get_deploy(self, deploy_id: str) -> DeployView:
        return self._read(
            "get_deploy", deploy_id, lambda ctx: self._view(ctx, self._row(deploy_id))
        )

    def get_deploys(self, deploy_ids: Sequence[str]) -> dict[str, DeployView]:
        """Many deploys in one consistent read; unknown ids are left out."""

        def read(ctx: MemCtx) -> dict[str, DeployView]:
            deploys = ctx.state.deploys
            return {i: self._view(ctx, deploys[i]) for i in sorted(set(deploy_ids)) if i in deploys}

        return self._read("get_deploys", None, read)

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        def read(ctx: MemCtx) -> CapacityPreview:
            row = self._row(deploy_id)
            delta = max(delta_replicas, 0)
            bound = reserved.capacity(ctx, row, delta)
            return (
                bound if bound is not None else unbound_preview(ctx, row, free_by_node(ctx), delta)
            )

        return self._read("preview_capacity", deploy_id, read)

    def alias_guard(self, deploy_id: str) -> AliasInfo:
        def read(ctx: MemCtx) -> AliasInfo:
            if applies(ctx.active, "alias_guard_unwired", deploy_id):
                raise AliasGuardUnavailable("unwired", "the alias guard is not wired")
            if applies(ctx.active, "alias_guard_error", deploy_id):
                raise AliasGuardUnavailable("read_error", "the alias guard could not be read")
            return AliasInfo(deploy_id, names(self._row(deploy_id).aliases))

        return self._read("alias_guard", deploy_id, read)

    def check_quota(self, deploy_id: str, *, delta_replicas: int) -> QuotaStatus:
        return self._read(
            "check_quota",
            deploy_id,
            lambda ctx: mutations.check_quota(
                ctx, self._row(deploy_id), delta_replicas=delta_replicas
            ),
        )

    def check_billing(self, deploy_id: str) -> None:
        self._read(
            "check_billing",
            deploy_id,
            lambda ctx: mutations.check_billing(ctx, self._row(deploy_id)),
        )

    def get_operation(self, op_id: str) -> Operation:
        def read(ctx: MemCtx) -> Operation:
            op = ctx.state.ops_by_id.get(op_id)
            if op is None:
                raise NotFound(f"no operation {op_id!r}")
            return self._live(ctx, op)

        return self._read("get_operation", None, read)

    def list_members(self, endpoint_id: str) -> tuple[DeployView, ...]:
        def read(ctx: MemCtx) -> tuple[DeployView, ...]:
            views = tuple(
                self._view(ctx, d) for d in ctx.state.deploys.values() if d.endpoint == endpoint_id
            )
            if not views:
                raise NotFound(f"no CMP endpoint {endpoint_id!r}")
            return views

        return self._read("list_members", None, read)

    # -- the Core port: reservations (R-GPS) --------------------------------------------

    def admission_preview(
        self, deploy_id: str, *, delta_replicas: int, releasing: Sequence[str] = ()
    ) -> AdmissionPreview:
        """Read-only VRAM admission of a start / scale-up, not counting ``releasing`` members."""
        return self._read(
            "admission_preview",
            deploy_id,
            lambda ctx: reserved.preview(ctx, self._row(deploy_id), releasing),
        )

    def witness(self, deploy_id: str) -> WitnessResult:
        """The UUIDs each ready replica group got, as placement gave them."""

        def read(ctx: MemCtx) -> WitnessResult:
            self._row(deploy_id)
            return reserved.witness(ctx, deploy_id)

        return self._read("witness", deploy_id, read)

    def reservation_deploys(self, reservation_id: str) -> tuple[DeployView, ...]:
        def read(ctx: MemCtx) -> tuple[DeployView, ...]:
            ids = set(reserved.bound_to(ctx, reservation_id))
            return tuple(self._view(ctx, d) for d in ctx.state.deploys.values() if d.id in ids)

        return self._read("reservation_deploys", None, read)

    # -- the Core port: mutations ----------------------------------------------------------

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        """Each submission as its own call (``SimPool`` on SQLite); a crash propagates."""
        out: list[Operation | Exception] = []
        for s in submissions:
            try:
                out.append(submit_one(self, s))
            except Exception as exc:  # this submission's answer
                out.append(exc)
        return out


@dataclass(frozen=True)
class _Log:
    """``MemoryPool``'s side of ``seam.Recording``: the operations and deploys of its state."""

    pool: MemoryPool

    def seen(self, ctx: MemCtx, key: str) -> OperationRec | None:
        return ctx.state.ops_by_key.get(key)

    def row(self, ctx: MemCtx, deploy_id: str) -> DeployRec:
        return self.pool._row(deploy_id)

    def record(
        self,
        ctx: MemCtx,
        kind: OperationKind,
        deploy_id: str,
        key: str,
        replicas: int | None,
        outcome: Outcome,
    ) -> OperationRec:
        row = self.pool._row(deploy_id)
        ctx.state.op_seq += 1
        seq = ctx.state.op_seq
        op = OperationRec(
            **operation_fields(seq, key, row.id, kind, replicas, outcome, row.version, ctx.now)
        )
        ctx.state.record(op)
        return op

    def settle(self, ctx: MemCtx) -> None:
        self.pool._commit_changes(ctx)

    def live(self, ctx: MemCtx, op: OperationRec, *, latest: bool) -> Operation:
        return self.pool._live(ctx, op)

    def origin(self, op: OperationRec) -> tuple[str, str]:
        return op.deploy, op.kind

    def version(self, row: DeployRec) -> int:
        return row.version
