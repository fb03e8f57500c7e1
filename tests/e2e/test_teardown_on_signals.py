"""Stopped by any signal, the test and benchmark wrappers leave nothing running (issue 9 §2.12).

``tools/with_postgres.py`` (``make test``) and the benchmarks start a PostgreSQL
server or a ``dagster dev`` process group. Stopped by SIGTERM (``timeout``) or
SIGHUP, Python skipped their cleanup and the server kept running.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gps_dagster.demo.devserver import REPO, group_members

pytestmark = pytest.mark.slow
WITH_POSTGRES = REPO / "tools" / "with_postgres.py"
CHILD = "import os, sys; print('child', os.getpid(), flush=True); sys.stdin.read()"
"""A command that runs until it is told to stop, without sleeping."""


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


class Lines:
    """Stdout lines of a child as they come, with a deadline (no blocking read)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc, self.fd = proc, proc.stdout.fileno()
        self.buffer, self.seen = b"", []  # type: tuple[bytes, list[str]]

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line matching ``pattern`` (fails after ``timeout`` s or at EOF)."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\n", 1)
                line = raw.decode(errors="replace")
                self.seen.append(line)
                match = re.search(pattern, line)
                if match:
                    return match
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} not printed within {timeout:.0f} s: {self.seen}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                assert chunk, f"{self.proc.args} ended before printing {pattern!r}: {self.seen}"
                self.buffer += chunk


def stop_leftovers(child: int | None, server: int | None) -> None:
    """Whatever a failed run left: the command, then the server (fast shutdown, then kill)."""
    if child is not None and alive(child):
        os.kill(child, signal.SIGKILL)
    if server is None or not alive(server):
        return
    os.kill(server, signal.SIGINT)
    deadline = time.monotonic() + 30
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(server):
        os.kill(server, signal.SIGKILL)


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name
)
def test_with_postgres_stopped_by_a_signal_stops_the_server_and_the_command(
    sig: signal.Signals,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(WITH_POSTGRES), "--", sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    lines = Lines(proc)
    server = child = None
    data_dir = None
    try:
        data_dir = Path(lines.wait_for(r"PostgreSQL up at \S+host=([^\s&]+)", 120).group(1))
        server = int((data_dir / "postmaster.pid").read_text().split()[0])
        child = int(lines.wait_for(r"^child (\d+)", 60).group(1))
        assert alive(server) and alive(child)
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=120)
        assert not alive(server), "PostgreSQL kept running"
        assert not children_of(server)
        assert not alive(child), "the command kept running"
        assert not data_dir.exists(), "the server's data was left behind"
        assert code == 128 + sig, f"with_postgres exited with {code}"  # like a shell reports it
    finally:
        stop_leftovers(child, server)
        reap(proc)
        if data_dir is not None:
            shutil.rmtree(data_dir.parent, ignore_errors=True)


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill if still running, wait, and close the pipes (not left to the garbage collector)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def run_script(script: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, **env},
        cwd=REPO,
    )


def test_bench_pass_stopped_by_sigterm_stops_its_postgresql() -> None:
    # 10,000 schedules take minutes to set up: the signal surely lands while it works
    proc = run_script(REPO / "bench" / "pass.py", GPS_BENCH_SIZES="10000", GPS_BENCH_WALLCLOCK="0")
    lines = Lines(proc)
    server = None
    try:
        data_dir = Path(lines.wait_for(r"PostgreSQL up at \S+host=([^\s&]+)", 120).group(1))
        server = int((data_dir / "postmaster.pid").read_text().split()[0])
        lines.wait_for(r"engine sweep", 60)
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=120)
        assert not alive(server), "PostgreSQL kept running"
        assert not data_dir.exists()
        assert code == 128 + signal.SIGTERM, f"bench/pass.py exited with {code}"
    finally:
        stop_leftovers(None, server)
        reap(proc)


def test_bench_dagster_lag_stopped_by_sigterm_stops_dagster_dev() -> None:
    script = REPO / "bench" / "dagster_lag.py"
    proc = run_script(script, "--boundaries", "1", "--pairs", "1")
    group = None
    try:
        group = int(
            Lines(proc).wait_for(r"dagster dev started \(process group (\d+)\)", 180).group(1)
        )
        assert group_members(group)
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=120)
        assert not group_members(group), "dagster dev kept running"
        assert code == 128 + signal.SIGTERM, f"bench/dagster_lag.py exited with {code}"
    finally:
        if group is not None and group_members(group):
            os.killpg(group, signal.SIGKILL)
        reap(proc)
