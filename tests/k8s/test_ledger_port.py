"""The Kubernetes adapter reaches the reservation ledger only through its port (no cluster).

``Reservations.locked`` must enter the ledger's own locked transaction and keep the row read
under the lock pinned until the block ends: admission decides from that row, never from a
second read outside the lock, and an unknown reservation is the port's ``NotFound``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from gps_dagster.backends.k8s.gps import Reservations
from gps_dagster.domain.gps.errors import ReservationNotFound
from gps_dagster.domain.gps.reservations import Reservation, ReservationSpec, SharingMode
from gps_dagster.ports import NotFound

T0 = datetime(2026, 1, 5, tzinfo=UTC)
RSV = Reservation.from_spec(
    ReservationSpec(
        id="rsv-a",
        node="n1",
        gpu_uuids=("GPU-00000000-0000-0000-0000-000000000001",),
        namespace="team",
        mode=SharingMode.TIME_SLICED,
        gpu_memory_mib=81920,
    ),
    at=T0,
)


class RecordingLedger:
    """A ledger that logs when its lock is taken and let go; reads outside the lock fail."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def get(self, reservation_id: str) -> Reservation:
        raise AssertionError("read outside the lock")

    def list(self, *, include_released: bool = True) -> list[Reservation]:
        return [RSV]

    @contextmanager
    def locked(self, reservation_id: str) -> Iterator[Reservation]:
        self.events.append(f"lock {reservation_id}")
        try:
            if reservation_id != RSV.id:
                raise ReservationNotFound(reservation_id)
            yield RSV
        finally:
            self.events.append(f"unlock {reservation_id}")


def test_the_row_read_under_the_ledger_lock_is_what_the_block_sees() -> None:
    ledger = RecordingLedger()
    gps = Reservations(kube=Any, ledger=ledger)  # type: ignore[arg-type]
    with gps.locked(RSV.id) as rsv:
        ledger.events.append("write")
        assert rsv is RSV and gps.get(RSV.id) is RSV  # pinned: no second read
    assert ledger.events == ["lock rsv-a", "write", "unlock rsv-a"]
    with pytest.raises(AssertionError, match="outside the lock"):
        gps.get(RSV.id)  # unpinned once the lock is let go


def test_an_unknown_reservation_is_not_found_and_its_lock_is_let_go() -> None:
    ledger = RecordingLedger()
    gps = Reservations(kube=Any, ledger=ledger)  # type: ignore[arg-type]
    with pytest.raises(NotFound) as err, gps.locked("rsv-gone"):
        pass
    assert err.value.reason == "unknown_reservation"
    assert ledger.events == ["lock rsv-gone", "unlock rsv-gone"] and gps.pinned == {}


def test_no_ledger_wired_refuses_a_bound_start() -> None:
    gps = Reservations(kube=Any, ledger=None)  # type: ignore[arg-type]
    with pytest.raises(Exception) as err:
        gps.locked(RSV.id)
    assert getattr(err.value, "reason", None) == "reservation_ledger_unwired"
