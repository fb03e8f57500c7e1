"""One call on the in-memory pool: its state, the clock instant and what it may read
(``sim.context``'s twin)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gps_dagster.backends.sim.ledger import Ledger
from gps_dagster.backends.sim.memory.state import PoolState
from gps_dagster.backends.sim.pure import Binding
from gps_dagster.domain.pool import Timings
from gps_dagster.ports import ReservationLedger


@dataclass
class MemCtx:
    """One call on the in-memory pool: its state, the clock instant and what it may read."""

    state: PoolState
    timings: Timings
    flavors: Mapping[str, str]
    ordinals: Mapping[str, int]
    now: float
    record_usage: bool = True
    active: list[tuple[str, str | None]] = field(default_factory=list)
    """Persistent faults in force: (effect, deploy)."""
    read_ledger: Callable[[], Ledger] = Ledger
    """Reads the reservation ledger (the port's ``list``): on first use in the call only, so a
    read that places nothing and admits nothing costs no ledger round trip."""
    bindings: Mapping[str, Binding] = field(default_factory=dict)
    book: ReservationLedger | None = None
    """Where reservation rows are read again under their lock (admission)."""

    _ledger: Ledger | None = None

    @property
    def ledger(self) -> Ledger:
        """Reservations holding GPUs of this pool, read once per call (on first use)."""
        if self._ledger is None:
            self._ledger = self.read_ledger()
        return self._ledger

    def faulted(self, effect: str) -> set[str]:
        return {d for e, d in self.active if e == effect and d is not None}
