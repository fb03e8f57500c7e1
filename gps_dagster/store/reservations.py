"""The reservation ledger repository (SQLAlchemy Core; SQLite and PostgreSQL).

Writes are short transactions. Re-pin (R-GPS-9) is a compare-and-set
``UPDATE … WHERE generation = :expected``: a stale generation changes nothing
and raises ``StaleGeneration``; a retry of a re-pin that already applied
(same UUIDs, generation already ``expected + 1``) is success, not an error.
Every mutation writes an audit row (actor, time, old → new) in the same
transaction. Times are parameters (``at=``); nothing reads the clock.

Locked admission (``admit``) serialises concurrent starts on the reservation
row (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite writers are already
serialised by ``BEGIN IMMEDIATE``), so two racing admissions for the last MiB
cannot both win.
"""

# Decisions embodied here (docs/decisions.md):
# * “The GPS ledger is the store's `ReservationRepository`”
# * “Audit”
# * “The reservation ledger lock is taken where the guarded write is, through the ledger port”

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import Connection, Engine, RowMapping

from gps_dagster.domain.documents import field_errors
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.gps.admission import Admitted, Decision, admit
from gps_dagster.domain.gps.errors import (
    InvalidTransition,
    ReservationExists,
    ReservationNotFound,
    StaleGeneration,
)
from gps_dagster.domain.gps.reservations import (
    Reservation,
    ReservationSpec,
    ReservationState,
    SharingMode,
    duplicate_uuid_errors,
)
from gps_dagster.store import audit, migrate
from gps_dagster.store.errors import GpuAlreadyReserved

__all__ = [
    "AuditEntry",
    "GpuAlreadyReserved",
    "ReservationRepository",
    "ensure_tables",
    "held_reservations",
    "lock_reservation",
]
from gps_dagster.store.reservation_tables import (
    reservation,
    reservation_audit,
    reservation_gpu,
    reservation_member,
    reservation_state_history,
)

_ALLOWED: dict[ReservationState, frozenset[ReservationState]] = {
    ReservationState.ACTIVE: frozenset(
        {ReservationState.DEGRADED, ReservationState.RELEASING, ReservationState.RELEASED}
    ),
    ReservationState.DEGRADED: frozenset(
        {ReservationState.ACTIVE, ReservationState.RELEASING, ReservationState.RELEASED}
    ),
    ReservationState.RELEASING: frozenset({ReservationState.RELEASED}),
    ReservationState.RELEASED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    reservation_id: str
    at: datetime
    actor: str
    action: str
    old_generation: int | None
    new_generation: int
    old_value: Any
    new_value: Any


def ensure_tables(engine: Engine) -> None:
    """Bring the database to the head migration, which creates the ledger tables (0002).

    Kept for callers that open a bare engine rather than ``Store.open``.
    """
    migrate.upgrade(engine)


class ReservationRepository:
    """CRUD, re-pin, lifecycle and locked admission of reservations."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> Engine:
        return self._engine

    @classmethod
    def migrated(cls, engine: Engine) -> ReservationRepository:
        """The repository on ``engine`` once its ledger tables exist (a bare engine is migrated)."""
        ensure_tables(engine)
        return cls(engine)

    @classmethod
    def if_present(cls, engine: Engine) -> ReservationRepository | None:
        """The repository when ``engine``'s database has the ledger tables (a bare engine may
        predate migration 0002); None otherwise. Probed outside any write transaction."""
        try:
            with engine.connect() as conn:
                conn.execute(sa.select(reservation.c.id).limit(0))
        except sa.exc.DBAPIError:
            return None
        return cls(engine)

    # -- reads ---------------------------------------------------------------

    def get(self, reservation_id: str) -> Reservation:
        with self._engine.connect() as conn:
            return _to_model(_row(conn, reservation_id))

    def list(self, *, include_released: bool = True) -> list[Reservation]:
        query = sa.select(reservation).order_by(reservation.c.id)
        if not include_released:
            query = query.where(reservation.c.state != ReservationState.RELEASED.value)
        with self._engine.connect() as conn:
            return [_to_model(r) for r in conn.execute(query).mappings()]

    def history(self, reservation_id: str) -> builtins.list[tuple[datetime, ReservationState]]:
        """State changes, oldest first, starting with ACTIVE at creation."""
        t = reservation_state_history
        with self._engine.connect() as conn:
            _row(conn, reservation_id)
            rows = conn.execute(
                sa.select(t.c.at, t.c.state)
                .where(t.c.reservation_id == reservation_id)
                .order_by(t.c.at, t.c.id)
            )
            return [(at, ReservationState(state)) for at, state in rows]

    def audit(self, reservation_id: str) -> builtins.list[AuditEntry]:
        t = reservation_audit
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(t).where(t.c.reservation_id == reservation_id).order_by(t.c.id)
            ).mappings()
            return [
                AuditEntry(
                    r["reservation_id"],
                    r["at"],
                    r["actor"],
                    r["action"],
                    r["old_generation"],
                    r["new_generation"],
                    json.loads(r["old_value"]) if r["old_value"] else None,
                    json.loads(r["new_value"]),
                )
                for r in rows
            ]

    # -- writes --------------------------------------------------------------

    def create(self, spec: ReservationSpec, *, at: datetime, actor: str) -> Reservation:
        """Record a new ACTIVE reservation at generation 1; its GPUs must be free in the ledger."""
        rsv = Reservation.from_spec(spec, at=at)
        with self._engine.begin() as conn:
            if conn.execute(sa.select(reservation.c.id).where(reservation.c.id == spec.id)).first():
                raise ReservationExists(spec.id)
            conn.execute(reservation.insert().values(**_to_row(rsv), updated_at=at))
            _claim_gpus(conn, rsv.id, rsv.gpu_uuids)
            conn.execute(
                reservation_state_history.insert().values(
                    reservation_id=rsv.id, at=at, state=rsv.state.value
                )
            )
            _audit(
                conn,
                rsv.id,
                at=at,
                actor=actor,
                action="create",
                old_gen=None,
                new_gen=1,
                old=None,
                new=_audit_value(rsv),
            )
        return rsv

    def repin(
        self,
        reservation_id: str,
        gpu_uuids: Sequence[str],
        *,
        expected_generation: int,
        at: datetime,
        actor: str,
    ) -> Reservation:
        """Move the reservation to other GPUs of its node, fenced by ``expected_generation``."""
        with self._engine.begin() as conn:
            current = _to_model(_row(conn, reservation_id))
            uuids = _checked_uuids(current, gpu_uuids)
            result = conn.execute(
                reservation.update()
                .where(
                    reservation.c.id == reservation_id,
                    reservation.c.generation == expected_generation,
                    reservation.c.state != ReservationState.RELEASED.value,
                )
                .values(
                    gpu_uuids=json.dumps(list(uuids)),
                    generation=reservation.c.generation + 1,
                    updated_at=at,
                )
            )
            if result.rowcount != 1:
                return self._repin_refused(current, uuids, expected_generation)
            conn.execute(
                reservation_gpu.delete().where(reservation_gpu.c.reservation_id == reservation_id)
            )
            _claim_gpus(conn, reservation_id, uuids)
            _audit(
                conn,
                reservation_id,
                at=at,
                actor=actor,
                action="repin",
                old_gen=expected_generation,
                new_gen=expected_generation + 1,
                old={"gpu_uuids": list(current.gpu_uuids)},
                new={"gpu_uuids": list(uuids)},
            )
            return _to_model(_row(conn, reservation_id))

    @staticmethod
    def _repin_refused(current: Reservation, uuids: tuple[str, ...], expected: int) -> Reservation:
        if current.state is ReservationState.RELEASED:
            raise InvalidTransition(current.id, old=current.state.value, new="repinned")
        if current.generation == expected + 1 and current.gpu_uuids == uuids:
            return current  # the same re-pin already applied: a retry after a lost response
        raise StaleGeneration(current.id, expected=expected, actual=current.generation)

    def set_state(
        self, reservation_id: str, state: ReservationState, *, at: datetime, actor: str
    ) -> Reservation:
        """Move along the lifecycle; setting the current state again is a no-op."""
        with self._engine.begin() as conn:
            current = _to_model(_row(conn, reservation_id, for_update=True))
            if current.state is state:
                return current
            if state not in _ALLOWED[current.state]:
                raise InvalidTransition(reservation_id, old=current.state.value, new=state.value)
            conn.execute(
                reservation.update()
                .where(reservation.c.id == reservation_id)
                .values(state=state.value, updated_at=at)
            )
            conn.execute(
                reservation_state_history.insert().values(
                    reservation_id=reservation_id, at=at, state=state.value
                )
            )
            if state is ReservationState.RELEASED:
                conn.execute(
                    reservation_gpu.delete().where(
                        reservation_gpu.c.reservation_id == reservation_id
                    )
                )
                conn.execute(
                    reservation_member.delete().where(
                        reservation_member.c.reservation_id == reservation_id
                    )
                )
            _audit(
                conn,
                reservation_id,
                at=at,
                actor=actor,
                action="set_state",
                old_gen=current.generation,
                new_gen=current.generation,
                old={"state": current.state.value},
                new={"state": state.value},
            )
            return current.model_copy(update={"state": state})

    def release(self, reservation_id: str, *, at: datetime, actor: str) -> Reservation:
        """RELEASED: billing stops, the GPUs return to the pool; releasing twice is success."""
        return self.set_state(reservation_id, ReservationState.RELEASED, at=at, actor=actor)

    # -- locked admission (R-GPS-3) --------------------------------------------

    @contextmanager
    def locked(self, reservation_id: str) -> Iterator[Reservation]:
        """A transaction holding the reservation's row lock while the block runs (``FOR UPDATE``
        on PostgreSQL; ``BEGIN IMMEDIATE`` on SQLite), the row read under it."""
        with self._engine.begin() as conn:
            yield lock_reservation(conn, reservation_id)

    def admit(
        self, reservation_id: str, deploy_id: str, memory_mib: int, *, at: datetime
    ) -> Decision:
        """Admit a member's start against the recorded members, serialised per reservation.

        On ``Admitted`` the member is recorded ``in_flight`` at the current
        generation; ``mark_running`` / ``remove_member`` keep the record true.
        """
        m = reservation_member
        with self._engine.begin() as conn:
            current = _to_model(_row(conn, reservation_id, for_update=True))
            rows = conn.execute(
                sa.select(m.c.deploy_id, m.c.memory_mib, m.c.status).where(
                    m.c.reservation_id == reservation_id
                )
            ).all()
            running = {d: mib for d, mib, s in rows if s == "running"}
            flying = {d: mib for d, mib, s in rows if s == "in_flight"}
            decision = admit(
                current, running=running, in_flight=flying, proposed=(deploy_id, memory_mib)
            )
            if isinstance(decision, Admitted):
                conn.execute(
                    m.delete().where(
                        m.c.reservation_id == reservation_id, m.c.deploy_id == deploy_id
                    )
                )
                conn.execute(
                    m.insert().values(
                        reservation_id=reservation_id,
                        deploy_id=deploy_id,
                        memory_mib=memory_mib,
                        status="in_flight",
                        generation=current.generation,
                        updated_at=at,
                    )
                )
            return decision

    def mark_running(self, reservation_id: str, deploy_id: str, *, at: datetime) -> None:
        m = reservation_member
        with self._engine.begin() as conn:
            conn.execute(
                m.update()
                .where(m.c.reservation_id == reservation_id, m.c.deploy_id == deploy_id)
                .values(status="running", updated_at=at)
            )

    def remove_member(self, reservation_id: str, deploy_id: str) -> None:
        m = reservation_member
        with self._engine.begin() as conn:
            conn.execute(
                m.delete().where(m.c.reservation_id == reservation_id, m.c.deploy_id == deploy_id)
            )

    # -- on a caller's connection (an adapter sharing the database: the simulated pool) ------

    def held_on(self, conn: Connection) -> dict[str, Reservation]:
        """``held_reservations`` on the caller's connection, inside its transaction."""
        return held_reservations(conn)

    def lock_on(self, conn: Connection, reservation_id: str) -> Reservation:
        """``lock_reservation`` on the caller's connection, for its transaction."""
        return lock_reservation(conn, reservation_id)

    def members(self, reservation_id: str) -> dict[str, tuple[int, str]]:
        """``deploy_id → (memory_mib, status)`` of recorded members."""
        m = reservation_member
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(m.c.deploy_id, m.c.memory_mib, m.c.status).where(
                    m.c.reservation_id == reservation_id
                )
            )
            return {d: (mib, s) for d, mib, s in rows}


def held_reservations(conn: Connection) -> dict[str, Reservation]:
    """Every reservation that still holds its GPUs (not RELEASED), read on the caller's connection.

    The simulated pool reads the ledger inside its own transaction with this,
    so placement and admission see the same ledger the CLI and Dagster see.
    """
    query = (
        sa.select(reservation)
        .where(reservation.c.state != ReservationState.RELEASED.value)
        .order_by(reservation.c.id)
    )
    return {r["id"]: _to_model(r) for r in conn.execute(query).mappings()}


def lock_reservation(conn: Connection, reservation_id: str) -> Reservation:
    """Read one reservation row locked for the caller's transaction (admission is serialised on
    it)."""
    return _to_model(_row(conn, reservation_id, for_update=True))


def _row(conn: Connection, reservation_id: str, *, for_update: bool = False) -> RowMapping:
    query = sa.select(reservation).where(reservation.c.id == reservation_id)
    if for_update and conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query).mappings().first()
    if row is None:
        raise ReservationNotFound(reservation_id)
    return row


def _to_model(row: RowMapping) -> Reservation:
    return Reservation(
        id=row["id"],
        node=row["node"],
        gpu_uuids=tuple(json.loads(row["gpu_uuids"])),
        namespace=row["namespace"],
        mode=SharingMode(row["mode"]),
        gpu_memory_mib=row["gpu_memory_mib"],
        headroom=Decimal(row["headroom"]),
        generation=row["generation"],
        state=ReservationState(row["state"]),
        created_at=row["created_at"],
    )


def _to_row(rsv: Reservation) -> dict[str, Any]:
    return {
        "id": rsv.id,
        "node": rsv.node,
        "gpu_uuids": json.dumps(list(rsv.gpu_uuids)),
        "namespace": rsv.namespace,
        "mode": rsv.mode.value,
        "gpu_memory_mib": rsv.gpu_memory_mib,
        "headroom": str(rsv.headroom),
        "generation": rsv.generation,
        "state": rsv.state.value,
        "created_at": rsv.created_at,
    }


def _checked_uuids(current: Reservation, gpu_uuids: Sequence[str]) -> tuple[str, ...]:
    """Validate re-pin targets with the reservation file's own rules; errors name ``gpus[i]``."""
    try:
        spec = ReservationSpec(**{**current.spec().model_dump(), "gpu_uuids": tuple(gpu_uuids)})
    except ValidationError as exc:
        errors = [
            FieldError(e.path.replace("gpu_uuids", "gpus", 1), e.reason, e.fix)
            for e in field_errors(exc)
        ]
        raise SpecInvalid(errors, source="repin") from None
    problems = duplicate_uuid_errors(spec.gpu_uuids, "gpus")
    if spec.mode is SharingMode.TIME_SLICED and len(spec.gpu_uuids) != 1:
        problems.append(
            FieldError(
                "gpus",
                "time_sliced_multi_gpu",
                "a time-sliced reservation holds exactly one GPU; pass one UUID",
            )
        )
    if problems:
        raise SpecInvalid(problems, source="repin")
    return spec.gpu_uuids


def _claim_gpus(conn: Connection, reservation_id: str, uuids: Iterable[str]) -> None:
    wanted = [u.lower() for u in uuids]
    taken = (
        conn.execute(
            sa.select(reservation_gpu.c.gpu_uuid).where(
                reservation_gpu.c.gpu_uuid.in_(wanted),
                reservation_gpu.c.reservation_id != reservation_id,
            )
        )
        .scalars()
        .all()
    )
    if taken:
        raise GpuAlreadyReserved(sorted(taken))
    try:
        with conn.begin_nested():
            conn.execute(
                reservation_gpu.insert(),
                [{"gpu_uuid": u, "reservation_id": reservation_id} for u in wanted],
            )
    except sa.exc.IntegrityError as exc:  # a concurrent create won the race for a GPU
        raise GpuAlreadyReserved(wanted) from exc


def _audit(
    conn: Connection,
    reservation_id: str,
    *,
    at: datetime,
    actor: str,
    action: str,
    old_gen: int | None,
    new_gen: int,
    old: Any,
    new: Any,
) -> None:
    conn.execute(
        reservation_audit.insert().values(
            reservation_id=reservation_id,
            at=at,
            actor=actor,
            action=action,
            old_generation=old_gen,
            new_generation=new_gen,
            old_value=None if old is None else json.dumps(old, sort_keys=True),
            new_value=json.dumps(new, sort_keys=True),
        )
    )
    # and in the log of every write (`/admin/audit`, R-API), in the same transaction
    audit.record(
        conn,
        at=at,
        actor=actor,
        action=f"reservation_{action}",
        kind="reservation",
        name=reservation_id,
        version=new_gen,
        detail={"old": old, "new": new},
    )


def _audit_value(rsv: Reservation) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(rsv.spec().model_dump_json())
    return value
