"""The reservation ledger as one simulated pool sees it, for one transaction.

The ledger itself lives in the store: the one source of truth the CLI, Dagster and this
simulator share. The composition root hands it over as a ``SharedLedger`` (the store's
``ReservationRepository`` implements it structurally), so the simulator never imports the
store. Each pool transaction reads, on its own connection, the reservations that still hold
GPUs of its nodes and translates their UUIDs to the pool's own GPU ids, so placement can keep
unbound workloads off reserved GPUs and bound ones on them.
"""

# Decisions embodied here (docs/decisions.md):
# * “The GPS ledger is the store's `ReservationRepository`”
# * “The reservation ledger lock is taken where the guarded write is, through the ledger port”

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.engine import Connection

from gps_dagster.domain.gps.reservations import Reservation, ReservationState, SharingMode
from gps_dagster.ports import ReservationBook

__all__ = ["Ledger", "SharedLedger", "ledger_of", "read_ledger"]


class SharedLedger(ReservationBook, Protocol):
    """The ledger plus its reads on a caller's connection: the simulated pool keeps its tables
    in the product database and reads (and locks) the ledger inside its own transaction."""

    def held_on(self, conn: Connection) -> dict[str, Reservation]:
        """Every reservation not RELEASED, read on ``conn``."""
        ...

    def lock_on(self, conn: Connection, reservation_id: str) -> Reservation:
        """The reservation's row, locked for ``conn``'s transaction."""
        ...


@dataclass(frozen=True)
class Ledger:
    rsvs: Mapping[str, Reservation] = field(default_factory=dict)
    """Reservations on this pool's nodes that are not RELEASED."""
    uuids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """reservation id -> the pool's GPU ids it holds (ledger order)."""
    reserved: frozenset[str] = frozenset()
    """Every GPU of the pool that belongs to a reservation: off limits to unbound workloads."""
    source: SharedLedger | None = None
    """Where the rows came from (None: no ledger is wired, so no reservation is known)."""

    def active(self, reservation_id: str) -> Reservation | None:
        rsv = self.rsvs.get(reservation_id)
        return rsv if rsv is not None and rsv.state is ReservationState.ACTIVE else None

    def time_sliced(self) -> list[Reservation]:
        return [r for r in self.rsvs.values() if r.mode is SharingMode.TIME_SLICED]

    def lock(self, conn: Connection, reservation_id: str) -> Reservation:
        """The reservation read again under its row lock, for ``conn``'s transaction."""
        if self.source is None:
            return self.rsvs[reservation_id]  # unreachable: no source, no reservation
        return self.source.lock_on(conn, reservation_id)


def read_ledger(
    source: SharedLedger,
    conn: Connection,
    pool_uuids: Mapping[str, str],
    nodes: Mapping[str, object],
) -> Ledger:
    """The ledger restricted to ``nodes``; ``pool_uuids`` maps lower-cased UUIDs to the pool's
    ids."""
    return ledger_of(source.held_on(conn), pool_uuids, nodes, source)


def ledger_of(
    held: Mapping[str, Reservation],
    pool_uuids: Mapping[str, str],
    nodes: Mapping[str, object],
    source: SharedLedger | None,
) -> Ledger:
    """Reservations of ``held`` on ``nodes``, their UUIDs translated to the pool's ids (shared with
    ``MemoryPool``)."""
    rsvs = {rid: r for rid, r in held.items() if r.node in nodes}
    uuids = {
        rid: tuple(pool_uuids[u.lower()] for u in r.gpu_uuids if u.lower() in pool_uuids)
        for rid, r in rsvs.items()
    }
    return Ledger(rsvs, uuids, frozenset(u for us in uuids.values() for u in us), source)
