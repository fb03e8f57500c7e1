"""One claims heartbeat serves every pass of an engine: one thread, parked between passes.

The heartbeat's contract is unchanged (claims renewed every third of the lease while a pass
runs, none after it ends, a beat in progress finished before the pass returns); what changed is
that passes no longer start and join a thread each. The waits here are bounded waits on events
for a thread's beat, a few periods of 50 ms at most.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from gps_dagster.clocks import VirtualClock
from gps_dagster.engine.heartbeat import ClaimHeartbeat

LEASE_S = 0.15  # a beat every 50 ms
T0 = datetime(2026, 10, 19, tzinfo=UTC)


class Renewals:
    """The due index's ``renew_claims``, counted; ``hold`` keeps a beat inside until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.called = threading.Event()
        self.hold: threading.Event | None = None
        self.lock = threading.Lock()

    def renew_claims(self, *, holder: str, now: datetime, lease_s: float) -> int:
        with self.lock:
            self.calls += 1
        self.called.set()
        if self.hold is not None:
            self.hold.wait(5)
        return 0


def _heartbeat(renewals: Renewals) -> ClaimHeartbeat:
    return ClaimHeartbeat(renewals, VirtualClock(T0), holder="h", lease_s=LEASE_S)  # type: ignore[arg-type]


def _threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "claims-heartbeat-h")


def test_many_passes_share_one_thread_and_it_beats_while_a_pass_runs() -> None:
    renewals = Renewals()
    hb = _heartbeat(renewals)
    before = _threads()
    for _ in range(300):
        with hb:
            pass
    assert _threads() - before <= 1  # not a thread per pass
    with hb:
        assert renewals.called.wait(2)  # beats while inside
    assert hb.beats >= 1


def test_no_beat_starts_after_the_pass_and_leaving_waits_for_the_beat_in_progress() -> None:
    renewals = Renewals()
    renewals.hold = threading.Event()
    hb = _heartbeat(renewals)
    left = threading.Event()

    def a_pass() -> None:
        with hb:
            assert renewals.called.wait(2)  # a beat has started and is held inside renew
        left.set()

    runner = threading.Thread(target=a_pass)
    runner.start()
    assert renewals.called.wait(2)
    assert not left.wait(0.2)  # the pass cannot end while its beat is in progress
    renewals.hold.set()
    assert left.wait(2)
    runner.join(2)
    calls = renewals.calls
    assert not threading.Event().wait(4 * hb.every_s)  # four periods later…
    assert renewals.calls == calls  # …no beat ran outside a pass


def test_an_idle_heartbeat_thread_leaves_and_the_next_pass_starts_one_again() -> None:
    renewals = Renewals()
    hb = _heartbeat(renewals)
    hb.IDLE_EXIT_S = 0.05
    with hb:
        pass
    first = hb._thread
    assert first is not None
    first.join(2)
    assert not first.is_alive() and hb._thread is None
    renewals.called.clear()
    with hb:
        assert renewals.called.wait(2)  # the new thread beats
    assert hb._thread is not None and hb._thread is not first
