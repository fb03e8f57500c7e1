"""Proof that a faketime run really fakes the clock (run by tools/faketime_tests.sh).

Collected in the same pytest invocation as the test folders, so it runs inside one of the very
processes (pytest-xdist workers) that run them. It fails unless that process and a subprocess
of it both read the instant given in ``GPS_FAKETIME_AT`` ("YYYY-MM-DD HH:MM:SS", UTC), give or
take the run's own duration.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime

SLACK_S = 3 * 3600
"""The faked clock runs from its start instant: allow the run's duration, not a day."""


def expected() -> float:
    at = os.environ.get("GPS_FAKETIME_AT")
    assert at, "GPS_FAKETIME_AT is not set: run this probe through tools/faketime_tests.sh"
    return datetime.strptime(at, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def test_this_process_reads_the_faked_instant() -> None:
    start = expected()
    now = time.time()
    assert start <= now < start + SLACK_S, f"time.time() is {now}, not faked to {start}"
    assert start <= datetime.now(UTC).timestamp() < start + SLACK_S


def test_a_subprocess_reads_the_faked_instant_too() -> None:
    start = expected()
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert start <= float(out) < start + SLACK_S, f"a subprocess reads {out.strip()}, not {start}"
