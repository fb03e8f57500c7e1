"""The real ``make demo`` (``python -m gps_dagster.demo``) for the end-to-end tests.

It runs in a temporary ``--var`` folder on free ports, without the start-up timeline backfill
(the tests run the README's backfill themselves), and is stopped with SIGTERM like Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gps_dagster.demo import env as demo_env
from gps_dagster.demo.devserver import REPO, free_ports, graphql, group_members

T = TypeVar("T")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Demo:
    proc: subprocess.Popen[bytes]
    var: Path
    url: str
    log: Path

    @property
    def env_file(self) -> Path:
        return self.var / "demo" / "env"

    def env(self) -> dict[str, str]:
        return demo_env.read(self.env_file)

    def sh(self, command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """``command`` in bash after ``. var/demo/env``, from the repository (as the README)."""
        script = f". {self.env_file} && {command}"
        return subprocess.run(
            ["bash", "-c", script],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={k: v for k, v in os.environ.items() if not k.startswith(("GPS_", "DAGSTER_"))},
            check=False,
        )

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return graphql(self.url, query, variables)


def start_demo(var: Path) -> Demo:
    port, api_port = free_ports(2)
    log = var.parent / f"{var.name}-demo.log"
    with open(log, "wb") as out:  # the child keeps its own descriptor; ours is closed at once
        proc = _popen_demo(var, port, api_port, out)
    demo = Demo(proc, var, f"http://127.0.0.1:{port}", log)
    wait_for(lambda: demo.env_file.is_file() or _died(demo), 240, f"the demo's env file ({log})")
    assert proc.poll() is None, log.read_text()[-3000:]
    return demo


def _popen_demo(var: Path, port: int, api_port: int, out: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gps_dagster.demo",
            "--var",
            str(var),
            "--port",
            str(port),
            "--api-port",
            str(api_port),
            "--no-timeline",
        ],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("GPS_", "DAGSTER_"))},
    )


def _died(demo: Demo) -> bool:
    if demo.proc.poll() is not None:
        raise AssertionError(f"the demo exited: {demo.log.read_text()[-3000:]}")
    return False


def stop_demo(demo: Demo) -> list[int]:
    """SIGTERM (what Ctrl-C does), then the pids of its process group still alive."""
    if demo.proc.poll() is None:
        os.killpg(demo.proc.pid, signal.SIGTERM)
        try:
            demo.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.proc.pid, signal.SIGKILL)
            demo.proc.wait(timeout=30)
    return group_members(demo.proc.pid)


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def readme_demo_commands(readme: Path = REPO / "README.md") -> list[str]:
    """The commands of the README's demo-commands block (continuations joined)."""
    text = readme.read_text()
    block = re.search(r"<!-- demo-commands.*?```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no demo-commands block"
    joined = block.group(1).replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


RUNS = """
query Runs($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}) {
    ... on Runs { results { runId jobName status tags { key value } } }
  }
}
"""


def runs(demo: Demo, **tags: str) -> list[dict[str, Any]]:
    filt = [{"key": k.replace("__", "/"), "value": v} for k, v in tags.items()]
    return list(demo.gql(RUNS, {"tags": filt})["runsOrError"]["results"])


def tag(run: dict[str, Any], key: str) -> str | None:
    return next((t["value"] for t in run["tags"] if t["key"] == key), None)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:3000]


def urlopen_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bool(resp.status == 200)
