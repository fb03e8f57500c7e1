"""The reservation ledger in memory: what ``ReservationRepository`` is to the SQL store.

The ``ports.ReservationBook`` Protocol (read, list, record, the locked read of admission) plus
the two reads a simulated pool makes on its own connection (``held_on``, ``lock_on``; the
connection is not needed here), so a pool and a ``MemoryStore`` share one ledger as ``SimPool``
and ``Store`` share ``ReservationRepository``. ``locked`` holds an in-process lock per
reservation while the block runs. GPUs belong to one reservation at a time; RELEASED ones
return theirs.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “The reservation ledger lock is taken where the guarded write is, through the ledger port”

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from gps_dagster.domain.gps.errors import InvalidTransition, ReservationExists, ReservationNotFound
from gps_dagster.domain.gps.reservations import Reservation, ReservationSpec, ReservationState
from gps_dagster.store.errors import GpuAlreadyReserved

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


class MemoryReservationBook:
    """Reservations by id, the GPUs each holds, and one lock per reservation."""

    def __init__(self) -> None:
        self._rows: dict[str, Reservation] = {}
        self._gpus: dict[str, str] = {}
        self._mutex = threading.RLock()
        self._locks: dict[str, threading.RLock] = {}

    def get(self, reservation_id: str) -> Reservation:
        with self._mutex:
            row = self._rows.get(reservation_id)
        if row is None:
            raise ReservationNotFound(reservation_id)
        return row

    def list(self, *, include_released: bool = True) -> builtins.list[Reservation]:
        with self._mutex:
            rows = [self._rows[k] for k in sorted(self._rows)]
        return [r for r in rows if include_released or r.state is not ReservationState.RELEASED]

    def create(self, spec: ReservationSpec, *, at: datetime, actor: str) -> Reservation:
        """Record a new ACTIVE reservation at generation 1; its GPUs must be free in the ledger."""
        rsv = Reservation.from_spec(spec, at=at)
        with self._mutex:
            if spec.id in self._rows:
                raise ReservationExists(spec.id)
            wanted = [u.lower() for u in rsv.gpu_uuids]
            taken = sorted(u for u in wanted if self._gpus.get(u, rsv.id) != rsv.id)
            if taken:
                raise GpuAlreadyReserved(taken)
            self._rows[rsv.id] = rsv.model_copy(
                update={"created_at": rsv.created_at.astimezone(UTC)}
            )
            self._gpus.update(dict.fromkeys(wanted, rsv.id))
        return rsv

    def set_state(
        self, reservation_id: str, state: ReservationState, *, at: datetime, actor: str
    ) -> Reservation:
        """Move along the lifecycle; setting the current state again is a no-op."""
        with self._mutex:
            current = self.get(reservation_id)
            if current.state is state:
                return current
            if state not in _ALLOWED[current.state]:
                raise InvalidTransition(reservation_id, old=current.state.value, new=state.value)
            moved = current.model_copy(update={"state": state})
            self._rows[reservation_id] = moved
            if state is ReservationState.RELEASED:
                self._gpus = {u: r for u, r in self._gpus.items() if r != reservation_id}
            return moved

    def release(self, reservation_id: str, *, at: datetime, actor: str) -> Reservation:
        """RELEASED: the GPUs return to the pool; releasing twice is success."""
        return self.set_state(reservation_id, ReservationState.RELEASED, at=at, actor=actor)

    @contextmanager
    def locked(self, reservation_id: str) -> Iterator[Reservation]:
        """The reservation read under its lock, held while the block runs."""
        with self._mutex:
            lock = self._locks.setdefault(reservation_id, threading.RLock())
        with lock:
            yield self.get(reservation_id)

    # -- a simulated pool's reads (its connection is not needed in memory) -----------

    def held_on(self, conn: object) -> dict[str, Reservation]:
        """Every reservation that still holds its GPUs (not RELEASED)."""
        return {r.id: r for r in self.list(include_released=False)}

    def lock_on(self, conn: object, reservation_id: str) -> Reservation:
        """The reservation's row (a pool transaction is already serialised in process)."""
        return self.get(reservation_id)


__all__ = ["MemoryReservationBook"]
