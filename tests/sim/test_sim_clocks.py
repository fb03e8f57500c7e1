"""Clocks: aware UTC instants; the virtual clock only moves forward when told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gps_dagster.clocks import VirtualClock, WallClock
from gps_dagster.ports import Clock


def test_virtual_clock_moves_only_when_told() -> None:
    clock = VirtualClock(datetime(2026, 10, 19, 8, tzinfo=timezone(timedelta(hours=7))))
    assert clock.now() == datetime(2026, 10, 19, 1, tzinfo=UTC) and clock.now().tzinfo is UTC
    assert clock.advance(60) == datetime(2026, 10, 19, 1, 1, tzinfo=UTC)
    clock.advance(timedelta(minutes=1))
    clock.set(datetime(2026, 10, 19, 2, tzinfo=UTC))
    assert clock.now() == datetime(2026, 10, 19, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "bad", [lambda c: c.set(datetime(2026, 1, 1, tzinfo=UTC)), lambda c: c.advance(-1)]
)
def test_virtual_clock_never_goes_back(bad) -> None:  # type: ignore[no-untyped-def]
    clock = VirtualClock(datetime(2026, 10, 19, tzinfo=UTC))
    with pytest.raises(ValueError):
        bad(clock)


def test_naive_datetimes_are_rejected() -> None:
    with pytest.raises(ValueError, match="naive"):
        VirtualClock(datetime(2026, 10, 19))
    clock = VirtualClock(datetime(2026, 10, 19, tzinfo=UTC))
    with pytest.raises(ValueError, match="naive"):
        clock.set(datetime(2026, 10, 20))


def test_both_clocks_satisfy_the_port() -> None:
    wall = WallClock(source=lambda: 1_792_465_200.25)  # the system clock's reading, injected
    assert isinstance(wall, Clock)
    assert isinstance(VirtualClock(datetime(2026, 10, 19, tzinfo=UTC)), Clock)
    assert wall.now() == datetime(2026, 10, 20, 3, 0, 0, 250_000, tzinfo=UTC)
    assert wall.now().tzinfo is UTC


def test_the_wall_clock_reads_the_system_clock_by_default() -> None:
    import inspect
    import time

    assert inspect.signature(WallClock).parameters["source"].default is time.time
