"""What the API is built on: the same store, core, engine and clock the CLI uses.

``ApiServices`` is assembled by the edge (``gps-dagster serve`` from the
runtime, tests from a virtual clock) and handed to ``create_app``; the API
itself names no concrete adapter and never reads the wall clock.
"""

# Decisions embodied here (docs/decisions.md):
# * “Limits”
# * “Apply-now locks its schedule, probes the sweep”

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gps_dagster.api.limits import Limits, RateLimiter
from gps_dagster.domain.pool import PoolSpec
from gps_dagster.engine.engine import Engine
from gps_dagster.engine.errors import Busy
from gps_dagster.ports import Clock, Core
from gps_dagster.store.repository import Store
from gps_dagster.store.reservations import ReservationRepository
from gps_dagster.store.sessions import SessionRepository
from gps_dagster.store.tokens import TokenRepository


@dataclass
class ApiServices:
    store: Store
    core: Core
    engine: Engine
    clock: Clock
    pool: PoolSpec | None = None
    """The simulated pool's spec (GPU sizes, capacity line); None on Kubernetes."""
    limits: Limits = field(default_factory=Limits)
    secure_cookies: bool = False
    """Mark the page's session cookie ``Secure`` (``serve --secure-cookies``, behind TLS or an
    ingress); it is also set when uvicorn sees https itself."""
    on_schedule_change: Callable[[str], None] | None = None
    """Called after a create/replace/delete (``serve`` asks Dagster to reload its code location)."""
    _passes: dict[str, threading.Lock] = field(default_factory=dict, repr=False)
    _passes_guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _rate: RateLimiter | None = field(default=None, repr=False)

    @property
    def tokens(self) -> TokenRepository:
        return TokenRepository(self.store.engine)

    @property
    def sessions(self) -> SessionRepository:
        return SessionRepository(self.store.engine)

    @property
    def reservations(self) -> ReservationRepository:
        return ReservationRepository(self.store.engine)

    @property
    def apply_now_rate(self) -> RateLimiter:
        if self._rate is None:
            self._rate = RateLimiter(
                self.clock,
                burst=self.limits.apply_now_burst,
                per_minute=self.limits.apply_now_per_minute,
            )
        return self._rate

    @contextmanager
    def one_pass(self, schedule: str) -> Iterator[None]:
        """At most one apply-now pass per schedule and process; the store's lock does the rest.

        The SQLite lease is shared by the threads of one process (one holder name),
        so without this two concurrent requests for one schedule would both run a pass
        instead of one answering 409 ``busy`` (R-PASS-2). Per schedule, not per process
        (R-API): another schedule's pass never makes this one busy.
        """
        with self._passes_guard:
            lock = self._passes.setdefault(schedule, threading.Lock())
        if not lock.acquire(blocking=False):
            raise Busy(schedule)
        try:
            yield
        finally:
            lock.release()
            with self._passes_guard:
                if not lock.locked() and self._passes.get(schedule) is lock:
                    del self._passes[schedule]  # bounded: only schedules with a pass running

    def schedule_changed(self, name: str) -> None:
        if self.on_schedule_change is not None:
            self.on_schedule_change(name)
