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
    """``with ClaimHeartbeat(...):`` renews ``holder``'s claims every ``lease_s / 3`` seconds."""

    def __init__(self, store: DueIndex, clock: Clock, *, holder: str, lease_s: float) -> None:
        self.store, self.clock, self.holder, self.lease_s = store, clock, holder, lease_s
        self.every_s = max(0.05, lease_s / 3)
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def __enter__(self) -> ClaimHeartbeat:
        self._thread = threading.Thread(
            target=self._run, name=f"claims-heartbeat-{self.holder}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every_s + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.beat()

    def beat(self) -> None:
        """Renew now (the thread's one step; never raises)."""
        try:
            self.store.renew_claims(holder=self.holder, now=self.clock.now(), lease_s=self.lease_s)
        except Exception as exc:  # the claims expire instead: the safe side (module docstring)
            if not self._failing:
                log.warning("claims heartbeat of %s failed (retried every %.1f s): %s",
                            self.holder, self.every_s, exc)
            self._failing = True
            return
        self._failing = False
        self.beats += 1
