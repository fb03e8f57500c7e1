"""Clocks: the wall clock for live use, a virtual clock for tests and simulation.

Nothing below the edges reads the time itself; it is handed a ``Clock``
(``gps_dagster.ports.Clock``). A virtual clock only moves when told to, so a
test of a 60-second publish lag takes microseconds and never sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime rejected: {value!r}; add a UTC offset")
    return value.astimezone(UTC)


class WallClock:
    """The real time, in UTC; ``source`` (seconds since the epoch) is the system clock."""

    def __init__(self, source: Callable[[], float] = time.time) -> None:
        self._source = source

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._source(), UTC)


class VirtualClock:
    """A clock that moves only when ``set`` or ``advance`` is called; never backwards."""

    def __init__(self, start: datetime) -> None:
        self._now = _aware(start)

    def now(self) -> datetime:
        return self._now

    def set(self, instant: datetime) -> None:
        instant = _aware(instant)
        if instant < self._now:
            raise ValueError(f"virtual clock cannot go back from {self._now} to {instant}")
        self._now = instant

    def advance(self, delta: float | timedelta) -> datetime:
        """Move forward by ``delta`` (seconds or a timedelta); returns the new instant."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        if step < timedelta(0):
            raise ValueError("virtual clock cannot go back")
        self._now = self._now + step
        return self._now
