"""The engine loop's wake-up: deploy ids a watch saw change, and a wait that they end early.

A narrow port between a core that can see the cluster change (the Kubernetes adapter's watch
cache calls ``notify`` from its informer thread) and the loop: the loop sleeps in ``wait`` until
its next due instant, ``notify`` ends the sleep at once, and the loop makes the schedules whose
steps wait on those deploys due now (``Engine.hasten``) — a pod deleted is seen by the follow-up
pass now, not ``follow_up_s`` later. Nothing here knows Kubernetes; a core without watches never
calls it and the loop keeps its plain cadence.
"""

# Decisions embodied here (docs/decisions.md):
# * “Watch events wake the engine loop for the deploys its steps wait on”

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable


class Wakeup:
    """Thread-safe: ``notify`` from any thread, ``wait`` / ``take`` from the loop's."""

    def __init__(self, on_notify: Callable[[], None] | None = None) -> None:
        """``on_notify``: also called on every notify (a test's sleeper waiting on its own
        condition is told to look)."""
        self._cond = threading.Condition()
        self._ids: set[str] = set()
        self._closed = False
        self.on_notify = on_notify
        self.notified = 0

    def notify(self, deploy_ids: Iterable[str]) -> None:
        with self._cond:
            before = len(self._ids)
            self._ids.update(deploy_ids)
            if len(self._ids) == before:
                return
            self.notified += 1
            self._cond.notify_all()
        if self.on_notify is not None:
            self.on_notify()

    def close(self) -> None:
        """The loop is stopping: ``wait`` returns at once from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self.on_notify is not None:
            self.on_notify()

    def pending(self) -> bool:
        with self._cond:
            return bool(self._ids) or self._closed

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` (wall time: the production sleeper) unless notified or
        closed first; True when woken early."""
        with self._cond:
            return self._cond.wait_for(lambda: bool(self._ids) or self._closed, timeout_s)

    def take(self) -> frozenset[str]:
        """The deploy ids notified since the last take (and forget them)."""
        with self._cond:
            ids, self._ids = frozenset(self._ids), set()
            return ids
