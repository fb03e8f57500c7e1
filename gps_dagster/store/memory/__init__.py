"""The engine's store in memory (``MemoryStore``) and its reservation ledger; no database
library."""

from gps_dagster.store.memory.reservations import MemoryReservationBook
from gps_dagster.store.memory.store import MemoryStore

__all__ = ["MemoryReservationBook", "MemoryStore"]
