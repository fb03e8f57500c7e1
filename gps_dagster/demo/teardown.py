"""Clean up on every stop signal, not only on Ctrl-C.

Python turns SIGINT into ``KeyboardInterrupt``, so ``finally`` blocks and
``atexit`` hooks run; SIGTERM (what ``timeout``, systemd and CI runners send)
and SIGHUP (a closed terminal) end the process at once and skip them. A tool
that started a PostgreSQL server or a ``dagster dev`` process group then leaves
it running. ``exit_on_signals`` makes all three signals raise ``Stopped``, an
exit like ``SystemExit``, so the tool's own cleanup runs whichever way it is
stopped; ``signals_held`` keeps a later signal from cutting that cleanup short.

An exception raised by a signal handler is lost when the handler happens to
run inside a destructor or a garbage-collector callback ("Exception ignored
in ..."): seen here with SQLAlchemy, a SIGTERM then did nothing at all. So
after the first signal the same signal is delivered again every
``REDELIVER_S``, except while a ``signals_held`` cleanup runs.
"""

# Decisions embodied here (docs/decisions.md):
# * “Stop signals clean up”

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REDELIVER_S = 1.0


class Stopped(SystemExit):
    """The process was asked to stop by ``signum``; exits with ``128 + signum`` like a shell."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(128 + signum)


class _Stopper:
    """The stop-signal handler of one ``exit_on_signals`` block."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.held = 0
        """How many ``signals_held`` blocks are cleaning up now: no redelivery meanwhile."""
        self.done = threading.Event()

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            threading.Thread(target=self._redeliver, name="stop-redeliver", daemon=True).start()
        raise Stopped(self.signum)

    def _redeliver(self) -> None:
        while not self.done.wait(REDELIVER_S):
            if not self.held and self.signum is not None:
                os.kill(os.getpid(), self.signum)


_active: list[_Stopper] = []


@contextmanager
def exit_on_signals() -> Iterator[None]:
    """Within the block, a stop signal raises ``Stopped`` (put the cleanup inside the block)."""
    stopper = _Stopper()
    previous = {sig: signal.signal(sig, stopper) for sig in STOP_SIGNALS}
    _active.append(stopper)
    try:
        yield
    finally:
        stopper.done.set()
        _active.remove(stopper)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """Ignore stop signals while the block cleans up (the process is exiting anyway)."""
    holding = list(_active)
    for stopper in holding:
        stopper.held += 1
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for stopper in holding:
            stopper.held -= 1
