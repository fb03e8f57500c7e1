"""The engine loop: passes on a tick, with an injected clock and sleeper (as dagster-k8s's client
takes its timer and sleeper).

``engine run`` and the tests drive the same object (as dagster-k8s's client
takes its sleeper and timer as constructor arguments; ``production_loop``
builds the real ones). A pass runs every ``interval_s`` seconds — sooner when
a schedule is due first (an intent boundary, steps in flight: ``Engine.next_due``,
read from the due index) — and the loop survives whatever a pass raises
(a database outage included, SPEC R-PASS-15): the error is logged, reported
to ``on_error``, and the next tick tries again.

``stop()`` may be called from a signal handler or another thread: the
production sleeper waits on the event ``stop`` sets, so the loop wakes at
once, and a pass in progress ends between two schedules.
"""

# Decisions embodied here (docs/decisions.md):
# * “SIGTERM and SIGINT stop `engine run` gracefully”
# * “A database outage is one line per failed pass”
# * “Watch events wake the engine loop for the deploys its steps wait on”

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from gps_dagster.engine.engine import Engine
from gps_dagster.engine.reports import PassReport
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.ports import Clock
from gps_dagster.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

Sleeper = Callable[[float], object]
"""Waits about that many seconds (a virtual clock's sleeper just advances it)."""


class EngineLoop:
    """Runs passes until stopped; one failed pass never ends the loop."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock,
        sleeper: Sleeper | None = None,
        interval_s: float = 30.0,
        wake_at_boundaries: bool = True,
        on_pass: Callable[[PassReport], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
        wakeup: Wakeup | None = None,
    ) -> None:
        """``wakeup``: watch events end a sleep early (``engine/wakeup.py``); without a
        ``sleeper`` the loop then sleeps in ``wakeup.wait``."""
        self.engine, self.clock, self.interval_s = engine, clock, interval_s
        self.wakeup = wakeup
        self.hastened = 0
        """Passes run early because a watch event concerned a deploy a step waits on."""
        self.wake_at_boundaries = wake_at_boundaries
        self.on_pass, self.on_error = on_pass, on_error
        self._stopping = threading.Event()
        default: Sleeper = wakeup.wait if wakeup is not None else self._stopping.wait
        self.sleeper: Sleeper = sleeper if sleeper is not None else default
        self.passes = 0
        self.failures = 0
        self.streak = 0
        """Passes failed in a row (0 after a pass that succeeded)."""
        self.pruned_at: datetime | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask the loop to end: it wakes now and returns after the schedule in progress."""
        self._stopping.set()
        if self.wakeup is not None:
            self.wakeup.close()

    def run(self, *, max_passes: int | None = None) -> int:
        """Pass, sleep, pass ... until ``stop()`` (or ``max_passes``); returns the passes run."""
        ran = 0
        while not self.stopping and (max_passes is None or ran < max_passes):
            self.tick()
            ran += 1
            if self.stopping or (max_passes is not None and ran >= max_passes):
                break
            self.sleep_until_due()
        return ran

    def sleep_until_due(self) -> None:
        """Sleep until the next pass is due, or until a watch event concerns a deploy a step
        waits on (its schedule is then made due now). Events about other deploys only shorten
        the nap: the loop goes back to sleep for the rest of it."""
        while not self.stopping:
            self.sleeper(self.next_wait())
            if self.wakeup is None or self.stopping:
                return
            woken = self.wakeup.take()
            if not woken:
                return  # slept the whole wait: the pass is due
            try:
                hastened = self.engine.hasten(sorted(woken))
            except Exception as exc:  # the store is down: the pass that follows says so
                log.warning("could not make the schedules of %d deploys due: %s", len(woken), exc)
                return
            if hastened:
                self.hastened += 1
                log.debug("watch events of %s: %s due now", sorted(woken)[:5], hastened[:5])
                return
            if self.next_wait() <= 0:
                return

    def tick(self) -> PassReport | None:
        """One pass; None when it raised (logged, counted, reported to ``on_error``)."""
        self.passes += 1
        try:
            report = self.engine.run_pass(stop=self._stopping.is_set)
        except Exception as exc:  # the loop owns what a pass lets out: it goes on (R-PASS-15)
            self.failures += 1
            self._failed(exc)
            if self.on_error is not None:
                self.on_error(exc)
            return None
        if self.streak:
            log.info("engine pass succeeded again after %d failed passes", self.streak)
            self.streak = 0
        if self.on_pass is not None:
            self.on_pass(report)
        self._prune()
        return report

    def _failed(self, exc: Exception) -> None:
        """One line per failed pass (cause, retry time); the traceback once per streak of
        failures: at debug for a database outage (its cause is the line), at error for
        anything else (a fault of ours). 20 s of outage used to log 781 tracebacks (R-PASS-15)."""
        self.streak += 1
        log.error(
            "engine pass failed (%d in a row); next try in %.0f s: %s",
            self.streak,
            self.interval_s,
            exc,
        )
        if self.streak == 1:
            level = logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.ERROR
            log.log(level, "the first failed pass of this streak raised:", exc_info=exc)

    def _prune(self) -> None:
        """Retention, once per ``prune_interval_s`` (R-PASS-15: a failure is logged, not raised)."""
        every = self.engine.config.prune_interval_s
        now = self.clock.now()
        if every <= 0 or (
            self.pruned_at is not None and now - self.pruned_at < timedelta(seconds=every)
        ):
            return
        self.pruned_at = now
        try:
            done = self.engine.prune(now)
        except Exception as exc:  # retention only saves space: the next interval tries again
            log.warning("retention pass failed: %s", exc, exc_info=exc)
            return
        if done.transitions or done.events:
            log.info("retention: deleted %s", done)

    def next_wait(self) -> float:
        """Seconds until the next pass: the interval, or less when a boundary comes first."""
        now = self.clock.now()
        wake = now + timedelta(seconds=self.interval_s)
        if self.wake_at_boundaries:
            try:
                due = self.engine.next_due(now)  # the due index: one indexed read, no parsing
            except StoreUnavailable as exc:  # the failed pass's line already said so
                log.debug("could not read when schedules are next due: %s", exc)
                due = None
            except Exception as exc:  # keep the plain interval
                log.warning("could not read when schedules are next due: %s", exc)
                due = None
            if due is not None and due < wake:
                wake = due
        return max(0.0, (wake - self.clock.now()).total_seconds())


def production_loop(
    engine: Engine,
    *,
    clock: Clock,
    interval_s: float,
    wake_at_boundaries: bool = True,
    on_pass: Callable[[PassReport], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
    wakeup: Wakeup | None = None,
) -> EngineLoop:
    """The loop ``engine run`` uses: real waits on the stop event (``stop()`` wakes it), or on
    ``wakeup`` (watch events and ``stop()`` wake it)."""
    return EngineLoop(
        engine,
        clock=clock,
        interval_s=interval_s,
        wake_at_boundaries=wake_at_boundaries,
        on_pass=on_pass,
        on_error=on_error,
        wakeup=wakeup,
    )
