"""The claims' heartbeat: a live replica keeps its due claims; a dead one loses them in one lease.

A replica's claims on due schedules (``store/due.py``) last ``claim_ttl_s`` (15 s). Serving a
chunk of a storm may take longer than that, so while a pass runs a daemon thread renews every
claim this replica holds each third of the lease — as Kubernetes' leader election renews its
15 s lease well before it runs out (client-go ``leaderelection``: ``LeaseDuration`` 15 s,
``RenewDeadline`` 10 s, ``RetryPeriod`` 2 s). A replica that is SIGKILLed stops renewing, and a
survivor takes its claims over once the lease has run out: the takeover is bounded by the lease,
not by the longest pass (R-NEXT-4).

The thread waits on an event (``stop`` wakes it at once) and reads "now" from the engine's
clock, so a test on a virtual clock renews to virtual instants. A renewal that fails (the
database is down) is logged once per outage and retried next beat: the claims then simply
expire, which is the safe side (another replica serves them; fence, CAS and keys stay the
guarantee).
"""

# Decisions embodied here (docs/decisions.md):
# * “Due claims: a 15 s lease renewed on a heartbeat, taken in chunks of 50”

from __future__ import annotations

import logging
import threading
from types import TracebackType

from gps_dagster.engine.store_ports import DueIndex
from gps_dagster.ports import Clock

log = logging.getLogger(__name__)


class ClaimHeartbeat:
    """``with heartbeat:`` renews ``holder``'s claims every ``lease_s / 3`` seconds while inside.

    One heartbeat serves every pass of its engine: its thread is started by the first pass and
    parks between passes (a thread started and joined per pass cost a simulated year of passes
    seconds of thread start-up), and leaves after ``IDLE_EXIT_S`` without a pass. Passes may
    overlap (nested or from several threads): the claims are renewed while any is inside. No
    beat starts after the last one has left, and leaving waits for a beat in progress."""

    IDLE_EXIT_S = 30.0

    def __init__(self, store: DueIndex, clock: Clock, *, holder: str, lease_s: float) -> None:
        self.store, self.clock, self.holder, self.lease_s = store, clock, holder, lease_s
        self.every_s = max(0.05, lease_s / 3)
        self.beats = 0
        self._cond = threading.Condition()
        self._inside = 0
        self._entries = 0
        """Counts entries and exits: a wait that sees it change was cut short by one."""
        self._beating = False
        self._thread: threading.Thread | None = None
        self._failing = False

    def __enter__(self) -> ClaimHeartbeat:
        with self._cond:
            self._inside += 1
            self._entries += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"claims-heartbeat-{self.holder}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._cond:
            self._inside -= 1
            self._entries += 1
            self._cond.notify_all()
            while self._inside == 0 and self._beating:
                self._cond.wait()  # the beat in progress ends before the pass does

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._inside == 0:
                    seen = self._entries
                    self._cond.wait(self.IDLE_EXIT_S)
                    if self._inside == 0 and self._entries == seen:
                        self._thread = None  # idle: the next pass starts a new thread
                        return
                    continue
                seen = self._entries
                self._cond.wait(self.every_s)
                if self._inside == 0 or self._entries != seen:
                    continue  # a pass came or went: a full period from now on
                self._beating = True
                self._cond.release()
                try:
                    self.beat()
                finally:
                    self._cond.acquire()
                    self._beating = False
                    self._cond.notify_all()

    def beat(self) -> None:
        """Renew now (the thread's one step; never raises)."""
        try:
            self.store.renew_claims(holder=self.holder, now=self.clock.now(), lease_s=self.lease_s)
        except Exception as exc:  # the claims expire instead: the safe side (module docstring)
            if not self._failing:
                log.warning(
                    "claims heartbeat of %s failed (retried every %.1f s): %s",
                    self.holder,
                    self.every_s,
                    exc,
                )
            self._failing = True
            return
        self._failing = False
        self.beats += 1
