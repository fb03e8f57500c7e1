"""Run ``dagster dev`` as a child we fully own: demo, end-to-end tests and benchmark.

Three pitfalls measured on this machine (docs/decisions.md: "Stop signals clean up.") shape this
module:

* started from a non-interactive shell, ``dagster dev`` inherits an ignored
  SIGINT (and may ignore SIGTERM for seconds); handlers are reset to default
  before exec;
* its webserver, daemon and code server are children: the whole process
  group is signalled, first SIGTERM, then SIGKILL after a bounded wait;
* the webserver answers HTTP 200 ~9 s after start; ``wait_ready`` polls with
  a deadline and fails with the tail of the log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gps_dagster.cli.dagster_client import (
    graphql,
    runs_by_tag,
)
from gps_dagster.domain.step_state import Gate

REPO = Path(__file__).resolve().parents[2]


def _reset_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def prepare_home(dagster_home: Path, template: Path | None = None) -> Path:
    """Create ``dagster_home`` with the instance config (default: the repo's dagster.yaml)."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template or REPO / "dagster.yaml", dagster_home / "dagster.yaml")
    return dagster_home


def group_members(pgid: int) -> list[int]:
    """Pids still alive in process group ``pgid`` (zombies excluded)."""
    alive: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(entry.name))
    return alive


class DagsterDev:
    """One ``dagster dev -f definitions.py`` process group."""

    def __init__(
        self,
        *,
        dagster_home: Path,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 3000,
        definitions: Path | None = None,
        log_path: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.dagster_home = dagster_home
        self.host, self.port = host, port
        self.definitions = definitions or REPO / "definitions.py"
        self.log_path = log_path or dagster_home / "dagster-dev.log"
        self.cwd = cwd or REPO
        self.env = {**os.environ, **(env or {}), "DAGSTER_HOME": str(dagster_home)}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> DagsterDev:
        exe = Path(sys.executable).with_name("dagster")
        cmd = [str(exe), "dev", "-f", str(self.definitions), "-h", self.host, "-p", str(self.port)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_reset_signals,
        )
        log.close()
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Block until the webserver answers HTTP 200 (or raise with the log tail)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"dagster dev exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"dagster dev not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> list[int]:
        """SIGTERM the group, SIGKILL what is left after ``grace`` s; returns pids still alive."""
        if self.proc is None:
            return []
        pgid = self.proc.pid
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()
                if not group_members(pgid):
                    break
                time.sleep(0.2)
            if not group_members(pgid):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        return group_members(pgid)

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return graphql(self.url, query, variables)

    def runs_by_tag(self, key: str, value: str) -> list[dict[str, Any]]:
        return runs_by_tag(self.url, key, value)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: every socket is held open until all are picked (``free_port``
    twice may return the same port, the kernel handing a just-closed one out again)."""
    import socket
    from contextlib import ExitStack

    with ExitStack() as stack:
        held = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]


def seed_database(
    db_url: str,
    *,
    pool_file: Path,
    schedule_files: list[Path],
    gate: str = Gate.ENFORCE,
) -> None:
    """A fresh simulated pool + the given schedules + the gate, at the runtime's clock
    (``GPS_CLOCK``, else the wall clock), through the composition root."""
    from gps_dagster.domain.schedules import parse_schedule
    from gps_dagster.runtime import build_runtime, settings_from_env

    settings = settings_from_env(backend="sim", db_url=db_url, pool_file=str(pool_file))
    rt = build_runtime(settings, reload_pool=True)
    try:
        now = rt.clock.now()
        for path in schedule_files:
            spec = parse_schedule(path.read_text(), source=str(path))
            rt.store.apply_schedule(spec, now=now)
        rt.store.set_gate(gate, now=now)
    finally:
        rt.close()


def hourly_key(instant: Any) -> str:
    """The ``schedule_timeline`` partition key of the hour containing ``instant`` (UTC)."""
    from datetime import UTC

    return str(instant.astimezone(UTC).strftime("%Y-%m-%d-%H:00"))


def materialize_timeline(
    env: dict[str, str],
    first: str,
    last: str,
    *,
    cwd: Path | None = None,
    timeout: float = 180,
    command_prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``dagster asset materialize`` of the timeline over a partition range: one run.

    ``command_prefix`` runs the command through a wrapper, e.g. ``faketime`` in the tests:
    Dagster checks partition keys against its own wall clock, which no setting can replace.
    """
    exe = Path(sys.executable).with_name("dagster")
    cmd = [
        *command_prefix,
        str(exe),
        "asset",
        "materialize",
        "-f",
        str(REPO / "definitions.py"),
        "--select",
        "schedule_timeline",
        "--partition-range",
        f"{first}...{last}",
    ]
    return subprocess.run(
        cmd,
        cwd=cwd or REPO,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
