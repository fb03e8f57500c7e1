"""One transaction on one simulated pool: the connection, the clock instant and what it may read.

Its own module so that the dynamics and the reservation logic (``reserved``)
can both use it without importing each other.
"""

# Decisions embodied here (docs/decisions.md):
# * “The sim's storm path costs statements, not an algorithm: cut them”

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection, Row

from gps_dagster.backends.sim.ledger import Ledger
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.pool import Timings


@dataclass
class Ctx:
    """One transaction on one pool."""

    conn: Connection
    pool: str
    timings: Timings
    flavors: Mapping[str, str]
    """node -> flavor (nodes never change after load)."""
    ordinals: Mapping[str, int]
    now: float
    record_usage: bool = True
    touched: set[str] = field(default_factory=set)
    active: list[tuple[str, str | None]] = field(default_factory=list)
    """Persistent faults in force: (effect, deploy)."""
    ledger: Ledger = field(default_factory=Ledger)
    """Reservations holding GPUs of this pool, read from the reservation ledger in this
    transaction."""
    bindings: Mapping[str, ExclusiveBinding | TimeSlicedBinding] = field(default_factory=dict)
    """deploy -> its reservation binding (bound deploys only)."""
    free: dict[str, int] | None = None
    """Published free unreserved GPUs per node, kept by a batch session (``SimPool.batch``):
    time stands still in a session, so free GPUs only go, through ``allocate``. None: read."""
    rows: dict[str, Row[Any]] = field(default_factory=dict)
    """Deploy rows read in this transaction (the pool row is locked: only this transaction
    writes them). Every write of a deploy row drops it (``forget``); a rolled-back savepoint
    drops them all."""

    def forget(self, deploy_id: str | None = None) -> None:
        """A deploy row (every one: None) was written: read it again next time."""
        if deploy_id is None:
            self.rows.clear()
        else:
            self.rows.pop(deploy_id, None)

    def faulted(self, effect: str) -> set[str]:
        """Deploys a persistent fault ``effect`` is in force for."""
        return {d for e, d in self.active if e == effect and d is not None}
