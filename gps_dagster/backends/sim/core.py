"""``SimPool``: the embedded simulated GPU pool, an implementation of ``ports.Core``.

Every call is one database transaction on one pool: lock the pool row (row
lock on PostgreSQL; ``BEGIN IMMEDIATE`` already serialises SQLite), apply the
transitions due up to the injected clock's ``now``, then read or mutate. So
separate processes share one consistent pool, and two of them can never hand
out the same GPU. Idempotency keys are a unique column: a replayed key returns
the stored operation without touching the pool again.
"""

# Decisions embodied here (docs/decisions.md):
# * “The GPS ledger is the store's `ReservationRepository`”
# * “The reservation ledger lock is taken where the guarded write is, through the ledger port”
# * “`BatchingCore` is optional”
# * “The simulated pool is one serialisation point”
# * “The sim's storm path costs statements, not an algorithm: cut them”

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, Row

from gps_dagster.backends.sim import faults, loader, mutations, reserved, seam, views
from gps_dagster.backends.sim import schema as t
from gps_dagster.backends.sim.driver import DriverMixin
from gps_dagster.backends.sim.dynamics import (
    Ctx,
    advance,
    free_by_node,
    record_usage,
    save_next_event,
)
from gps_dagster.backends.sim.ledger import Ledger, SharedLedger, read_ledger
from gps_dagster.backends.sim.pure import Blocks, Outcome, operation_fields
from gps_dagster.domain.pool import FaultSpec, PoolSpec, SimSettings
from gps_dagster.ports import (
    AdmissionPreview,
    AliasGuardUnavailable,
    AliasInfo,
    CapacityPreview,
    Clock,
    DeployView,
    Fits,
    NotFound,
    Operation,
    OperationKind,
    QuotaStatus,
    ReservationBook,
    Submission,
    WitnessResult,
    submit_one,
)

R = TypeVar("R")
SESSION_MUTATIONS = 50
"""Mutations per transaction of ``submit_many``. Each runs in a savepoint; PostgreSQL keeps 64
subtransactions per transaction in shared memory and, past that, every other session's snapshot
checks go through ``pg_subtrans``: keep a transaction below it."""
_SEEN = sa.select(t.operations).where(
    t.operations.c.pool == sa.bindparam("pool"), t.operations.c.key == sa.bindparam("key")
)
_RECORD = t.operations.insert().returning(*t.operations.c)
"""Built once (the mutation path's statements; see ``views``)."""


def _ts(value: datetime) -> float:
    if value.tzinfo is None:
        raise ValueError("the clock returned a naive datetime")
    return value.timestamp()


class SimPool(DriverMixin, seam.MutatingPool[Ctx, Row[Any], Row[Any]]):
    """A simulated GPU pool stored in a SQLAlchemy database."""

    _deploys = mutations.DEPLOYS

    def __init__(
        self, engine: Engine, name: str, clock: Clock, ledger: SharedLedger | None = None
    ) -> None:
        """``ledger``: the reservation ledger (the store's, from the composition root); None:
        no reservation is known (bound deploys are refused as ``unknown_reservation``)."""
        self.engine, self.name, self.clock = engine, name, clock
        with engine.connect() as conn:
            row = conn.execute(sa.select(t.pools.c.settings).where(t.pools.c.name == name)).first()
            if row is None:
                raise NotFound(f"no simulated pool named {name!r}")
            nodes = conn.execute(
                sa.select(t.nodes.c.name, t.nodes.c.flavor, t.nodes.c.ordinal).where(
                    t.nodes.c.pool == name
                )
            ).all()
            uuids = (
                conn.execute(sa.select(t.gpus.c.uuid).where(t.gpus.c.pool == name)).scalars().all()
            )
            self._bindings = reserved.load_bindings(conn, name)
        self.settings = SimSettings.model_validate_json(row.settings)
        self._flavors = {n: f for n, f, _ in nodes}
        self._ordinals = {n: o for n, _, o in nodes}
        self._uuids = {str(u).lower(): str(u) for u in uuids}
        self._source = ledger
        self._session: Session | None = None

    def _ledger(self, conn: Connection) -> Ledger:
        if self._source is None:
            return Ledger()
        return read_ledger(self._source, conn, self._uuids, self._flavors)

    # -- construction --------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        engine: Engine,
        spec: PoolSpec,
        clock: Clock,
        *,
        replace: bool = False,
        ledger: SharedLedger | None = None,
    ) -> SimPool:
        """Load ``spec`` into the database unless a pool of that name exists (then open it).

        Reservations the pool file declares are recorded in ``ledger`` first (kept as they
        are if already there: the ledger, not the file, is the source of truth); a file that
        declares some needs a ledger.
        """
        t.ensure_schema(engine)
        if spec.reservations:
            if ledger is None:
                raise ValueError(
                    f"pool {spec.name!r} declares reservations: give it a reservation ledger"
                )
            record_reservations(ledger, spec, clock)
        source = ledger
        with engine.begin() as conn:
            present = loader.exists(conn, spec.name)
            if present and replace:
                loader.delete(conn, spec.name)
            if replace or not present:
                uuids = {u.lower(): u for n in spec.nodes for u in spec.uuids(n)}
                nodes = {n.name: n for n in spec.nodes}
                known = read_ledger(source, conn, uuids, nodes) if source is not None else Ledger()
                loader.load(conn, spec, _ts(clock.now()), known)
        return cls(engine, spec.name, clock, source)

    @classmethod
    def open(
        cls, engine: Engine, name: str, clock: Clock, *, ledger: SharedLedger | None = None
    ) -> SimPool:
        t.ensure_schema(engine)
        return cls(engine, name, clock, ledger)

    @staticmethod
    def pool_names(engine: Engine) -> list[str]:
        t.ensure_schema(engine)
        with engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(t.pools.c.name).order_by(t.pools.c.name))]

    # -- transactions --------------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Serve every call of the block from ONE transaction of the pool (``BatchingCore``).

        The pool row is locked once, due transitions applied once, and each mutation runs in a
        savepoint (an error undoes that call only); the pool's bookkeeping (next event,
        revision, usage) is written once at the end, and nothing is durable before the block
        exits. Time does not move inside a block. With faults declared the block is a no-op:
        a one-shot fault is consumed in its own transaction, as without a block. So it is on
        SQLite, whose one write lock the block would hold while the caller writes elsewhere.
        """
        if self._session is not None or not _is_postgres(self.engine) or self._faulty():
            yield
            return
        with self._tx() as (ctx, blocks):
            self._session = Session(ctx, blocks)
            ctx.free = free_by_node(ctx)
            try:
                yield
            finally:
                session, self._session = self._session, None
                ctx.free = None
            if session.mutated:
                if session.op_seq is not None:
                    p = t.pools
                    ctx.conn.execute(
                        p.update().where(p.c.name == self.name).values(op_seq=session.op_seq)
                    )
                self._commit_changes(ctx)

    def previews_count_fits(self) -> bool:
        """A block counts earlier fits only when it is a real session (see ``batch``)."""
        return _is_postgres(self.engine) and not self._faulty()

    def _faulty(self) -> bool:
        with self.engine.connect() as conn:
            return bool(
                conn.execute(
                    sa.select(t.faults.c.id).where(t.faults.c.pool == self.name).limit(1)
                ).first()
            )

    @contextmanager
    def _tx(self, *, write: bool = False) -> Iterator[tuple[Ctx, Blocks]]:
        if self._session is not None:
            ctx, blocks = self._session.ctx, self._session.blocks
            if not write:
                yield ctx, blocks
                return
            self._session.mutated = True
            self._session.previews = None  # what is free changed: previews start again
            free = None if ctx.free is None else dict(ctx.free)
            seq = self._session.op_seq
            try:
                with ctx.conn.begin_nested():
                    yield ctx, blocks
            except BaseException:
                ctx.free = free  # the savepoint undid the call: so is its allocation,
                ctx.forget()  # its writes of deploy rows
                self._session.op_seq = seq  # and its operation number
                raise
            return
        with self.engine.begin() as conn:
            query = sa.select(t.pools.c.clock_at, t.pools.c.next_event_at).where(
                t.pools.c.name == self.name
            )
            if _is_postgres(self.engine):
                query = query.with_for_update()
            head = conn.execute(query).first()
            if head is None:
                raise NotFound(f"no simulated pool named {self.name!r}")
            active = faults.persistent(conn, self.name)
            blocks = Blocks(
                unschedulable=faults.deploys_with(active, "unschedulable"),
                never_ready=faults.deploys_with(active, "never_ready"),
                fail_start=faults.deploys_with(active, "fail_start"),
                fail_stop=faults.deploys_with(active, "fail_stop"),
            )
            ctx = Ctx(
                conn,
                self.name,
                self.settings.timings,
                self._flavors,
                self._ordinals,
                float(head.clock_at),
                self.settings.record_usage,
                active=active,
                ledger=self._ledger(conn),
                bindings=self._bindings,
            )
            now = max(_ts(self.clock.now()), float(head.clock_at))
            advance(ctx, now, head.next_event_at, blocks.unschedulable, blocks.never_ready)
            yield ctx, blocks

    def _commit_changes(self, ctx: Ctx) -> None:
        save_next_event(ctx)
        ctx.conn.execute(
            t.pools.update()
            .where(t.pools.c.name == self.name)
            .values(revision=t.pools.c.revision + 1, clock_at=ctx.now)
        )
        record_usage(ctx)

    def _one_shots(self, op: str, deploy: str | None) -> list[FaultSpec]:
        if self._session is not None:  # a block only exists while no fault is declared
            return []
        with self.engine.begin() as conn:
            hits = faults.take(conn, self.name, op, deploy)
        seam.fire_taken(hits, op)
        return hits

    def _write(self, hits: list[FaultSpec]) -> AbstractContextManager[tuple[Ctx, Blocks]]:
        return self._tx(write=True)

    def _log(self) -> _Log:
        return _Log(self)

    def _read(self, op: str, deploy: str | None, fn: Callable[[Ctx, Blocks], R]) -> R:
        hits = self._one_shots(op, deploy)
        with self._tx() as (ctx, blocks):
            result = fn(ctx, blocks)
        seam.fire_at(hits, op, "before_commit")
        seam.fire_at(hits, op, "after_commit")
        return result

    @staticmethod
    def _row(ctx: Ctx, deploy_id: str) -> Row[Any]:
        row = views.deploy_row(ctx, deploy_id)
        if row is None:
            raise NotFound(f"no deploy {deploy_id!r}")
        return row

    # -- the Core port: reads --------------------------------------------------------------

    def get_deploy(self, deploy_id: str) -> DeployView:
        return self._read(
            "get_deploy",
            deploy_id,
            lambda ctx, _b: views.deploy_view(ctx, self._row(ctx, deploy_id)),
        )

    def get_deploys(self, deploy_ids: Sequence[str]) -> dict[str, DeployView]:
        """Many deploys in one consistent read; unknown ids are left out."""

        def read(ctx: Ctx, _b: Blocks) -> dict[str, DeployView]:
            d = t.deploys
            rows = list(
                ctx.conn.execute(
                    sa.select(d).where(d.c.pool == self.name, d.c.id.in_(list(deploy_ids)))
                )
            )
            return views.deploy_views(ctx, rows)

        return self._read("get_deploys", None, read)

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        def read(ctx: Ctx, _b: Blocks) -> CapacityPreview:
            row = self._row(ctx, deploy_id)
            session = self._session
            if session is None:
                return views.preview(ctx, row, free_by_node(ctx), max(delta_replicas, 0))
            if session.previews is None:
                session.previews = free_by_node(ctx)
            result = views.preview(ctx, row, session.previews, max(delta_replicas, 0))
            if isinstance(result, Fits) and row.id not in ctx.bindings:
                views.take(ctx, row, session.previews, max(delta_replicas, 0))
            return result

        return self._read("preview_capacity", deploy_id, read)

    def alias_guard(self, deploy_id: str) -> AliasInfo:
        def read(ctx: Ctx, _b: Blocks) -> AliasInfo:
            active = ctx.active
            if faults.applies(active, "alias_guard_unwired", deploy_id):
                raise AliasGuardUnavailable("unwired", "the alias guard is not wired")
            if faults.applies(active, "alias_guard_error", deploy_id):
                raise AliasGuardUnavailable("read_error", "the alias guard could not be read")
            row = self._row(ctx, deploy_id)
            return AliasInfo(deploy_id, tuple(json.loads(row.aliases)))

        return self._read("alias_guard", deploy_id, read)

    def check_quota(self, deploy_id: str, *, delta_replicas: int) -> QuotaStatus:
        return self._read(
            "check_quota",
            deploy_id,
            lambda ctx, _b: mutations.check_quota(
                ctx, self._row(ctx, deploy_id), delta_replicas=delta_replicas
            ),
        )

    def check_billing(self, deploy_id: str) -> None:
        self._read(
            "check_billing",
            deploy_id,
            lambda ctx, _b: mutations.check_billing(ctx, self._row(ctx, deploy_id)),
        )

    def get_operation(self, op_id: str) -> Operation:
        def read(ctx: Ctx, _b: Blocks) -> Operation:
            o = t.operations
            op = ctx.conn.execute(
                sa.select(o).where(o.c.pool == self.name, o.c.id == op_id)
            ).first()
            if op is None:
                raise NotFound(f"no operation {op_id!r}")
            return self._live(ctx, op)

        return self._read("get_operation", None, read)

    def list_members(self, endpoint_id: str) -> tuple[DeployView, ...]:
        def read(ctx: Ctx, _b: Blocks) -> tuple[DeployView, ...]:
            d = t.deploys
            rows = ctx.conn.execute(
                sa.select(d)
                .where(d.c.pool == self.name, d.c.endpoint == endpoint_id)
                .order_by(d.c.ordinal)
            ).all()
            if not rows:
                raise NotFound(f"no CMP endpoint {endpoint_id!r}")
            return tuple(views.deploy_view(ctx, r) for r in rows)

        return self._read("list_members", None, read)

    # -- the Core port: reservations (R-GPS) --------------------------------------------

    def admission_preview(
        self, deploy_id: str, *, delta_replicas: int, releasing: Sequence[str] = ()
    ) -> AdmissionPreview:
        """Read-only VRAM admission of a start / scale-up, not counting ``releasing`` members."""
        return self._read(
            "admission_preview",
            deploy_id,
            lambda ctx, _b: reserved.preview(ctx, self._row(ctx, deploy_id), releasing),
        )

    def witness(self, deploy_id: str) -> WitnessResult:
        """The UUIDs each ready replica group got, as placement gave them."""

        def read(ctx: Ctx, _b: Blocks) -> WitnessResult:
            self._row(ctx, deploy_id)
            return reserved.witness(ctx, deploy_id)

        return self._read("witness", deploy_id, read)

    def reservation_deploys(self, reservation_id: str) -> tuple[DeployView, ...]:
        def read(ctx: Ctx, _b: Blocks) -> tuple[DeployView, ...]:
            d = t.deploys
            ids = reserved.bound_to(ctx, reservation_id)
            rows = list(
                ctx.conn.execute(
                    sa.select(d).where(d.c.pool == self.name, d.c.id.in_(ids)).order_by(d.c.ordinal)
                )
            )
            return tuple(views.deploy_view(ctx, r) for r in rows)

        return self._read("reservation_deploys", None, read)

    def _live(self, ctx: Ctx, op: Row[Any], *, latest: bool = False) -> Operation:
        view = views.deploy_view(ctx, self._row(ctx, op.deploy))
        return views.to_operation(op, views.operation_state(ctx, op, view, latest=latest))

    # -- the Core port: mutations ----------------------------------------------------------

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        """The submissions in transactions of ``SESSION_MUTATIONS`` (a ``batch()`` block each:
        the pool row locked and due transitions applied once, a savepoint per mutation).

        A mutation refused inside a block is that submission's error and undoes only itself; a
        block that does not commit makes every submission of it that block's error (nothing of
        it is durable; each is resubmitted with its key). Without a real session (SQLite, faults
        declared) each submission is its own transaction, as its single call.
        """
        out: list[Operation | Exception] = []
        for start in range(0, len(submissions), SESSION_MUTATIONS):
            part = submissions[start : start + SESSION_MUTATIONS]
            results: list[Operation | Exception] = []
            try:
                with self.batch():
                    for s in part:
                        try:
                            results.append(submit_one(self, s))
                        except Exception as exc:  # this submission's answer
                            results.append(exc)
            except Exception as exc:  # the block did not commit: none of it is durable
                results = [exc] * len(part)
            out += results
        return out

    def _next_seq(self, ctx: Ctx) -> int:
        """The next operation number; a batch session counts in memory and writes it once."""
        p, session = t.pools, self._session
        if session is None:
            bump = p.update().where(p.c.name == self.name).values(op_seq=p.c.op_seq + 1)
            return int(ctx.conn.execute(bump.returning(p.c.op_seq)).scalar_one())
        if session.op_seq is None:
            query = sa.select(p.c.op_seq).where(p.c.name == self.name)
            session.op_seq = int(ctx.conn.execute(query).scalar_one())
        session.op_seq += 1
        return session.op_seq


@dataclass(frozen=True)
class _Log:
    """``SimPool``'s side of ``seam.Recording``: the operations table and the deploy rows."""

    pool: SimPool

    def seen(self, ctx: Ctx, key: str) -> Row[Any] | None:
        return ctx.conn.execute(_SEEN, {"pool": self.pool.name, "key": key}).first()

    def row(self, ctx: Ctx, deploy_id: str) -> Row[Any]:
        return self.pool._row(ctx, deploy_id)

    def record(
        self,
        ctx: Ctx,
        kind: OperationKind,
        deploy_id: str,
        key: str,
        replicas: int | None,
        outcome: Outcome,
    ) -> Row[Any]:
        seq = self.pool._next_seq(ctx)
        version = self.pool._row(ctx, deploy_id).version
        fields = operation_fields(seq, key, deploy_id, kind, replicas, outcome, version, ctx.now)
        return ctx.conn.execute(_RECORD, {"pool": self.pool.name, **fields}).one()

    def settle(self, ctx: Ctx) -> None:
        if self.pool._session is None:  # a batch session writes its bookkeeping once, at its end
            self.pool._commit_changes(ctx)

    def live(self, ctx: Ctx, op: Row[Any], *, latest: bool) -> Operation:
        return self.pool._live(ctx, op, latest=latest)

    def origin(self, op: Row[Any]) -> tuple[str, str]:
        return str(op.deploy), str(op.kind)

    def version(self, row: Row[Any]) -> int:
        return int(row.version)


@dataclass
class Session:
    """The one transaction of a ``batch()`` block."""

    ctx: Ctx
    blocks: Blocks
    mutated: bool = False
    previews: dict[str, int] | None = None
    """Free GPUs per node as the block's previews left them (fitting previews take theirs)."""
    op_seq: int | None = None
    """The last operation number handed out in the block (None: none yet); written at its end."""


def _is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def record_reservations(book: ReservationBook, spec: PoolSpec, clock: Clock) -> None:
    """Record the pool file's reservations in the ledger (those already there are kept)."""
    present = {r.id for r in book.list()}
    for rsv in spec.reservations:
        if rsv.id not in present:
            book.create(rsv, at=clock.now(), actor=f"pool-file:{spec.name}")
