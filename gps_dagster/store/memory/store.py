"""``MemoryStore``: the engine's store in memory, for ``simulate`` and millisecond engine tests.

Every ``EngineStore`` method (``engine/store_ports.py``) with the SQL ``Store``'s semantics,
translated method by method from ``store/*.py`` (the mixins name their sources), plus what
``simulate`` and its report read (``apply_schedule``, ``set_gate``, ``list_events``,
``list_transitions``, ``list_actions``, ``list_status``) and a reservation ledger
(``ledger()``) a pool can be handed too. It is the engine's store, not the API's: tokens,
sessions, apply-now requests and the API's tables stay the SQL store's alone. Its clock
(``database_now``) is the injected one.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”

from __future__ import annotations

from gps_dagster.ports import Clock
from gps_dagster.store.memory.bulk import BulkMixin
from gps_dagster.store.memory.due import DueMixin
from gps_dagster.store.memory.history import HistoryMixin
from gps_dagster.store.memory.reservations import MemoryReservationBook
from gps_dagster.store.memory.schedules import SchedulesMixin


class MemoryStore(SchedulesMixin, BulkMixin, DueMixin, HistoryMixin):
    """The product's engine state in dicts, for one process."""

    def __init__(self, clock: Clock, *, ledger: MemoryReservationBook | None = None) -> None:
        super().__init__(clock)
        self._book = ledger or MemoryReservationBook()

    def ledger(self) -> MemoryReservationBook:
        """The reservation ledger of this store (hand the same one to a pool)."""
        return self._book


__all__ = ["MemoryStore"]
