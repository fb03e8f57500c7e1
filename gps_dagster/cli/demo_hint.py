"""The CLI's side of the running demo's env file (``var/demo/env``, written by ``make demo``).

A ``gps-dagster`` command typed in the demo's folder without the demo's settings, while a demo
runs, prints a one-line hint to source them (the file's format: ``export K=V`` lines).
"""

# Decisions embodied here (docs/decisions.md):
# * “The demo and a second terminal share one instance through `var/demo/env`”

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

ENV_FILE = Path("var") / "demo" / "env"
PID_VARIABLE = "GPS_DEMO_PID"


def read(path: Path) -> dict[str, str]:
    """The settings of an env file (``export K=V`` lines)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            parts = shlex.split(value)
            out[key] = parts[0] if parts else ""
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def hint(cwd: Path, environ: Mapping[str, str]) -> str | None:
    """A line for a command that does not act on a running demo it could mean, else None."""
    path = cwd / ENV_FILE
    if not path.is_file() or PID_VARIABLE in environ:
        return None
    try:
        demo = read(path)
        pid = int(demo.get(PID_VARIABLE, "0"))
    except (OSError, ValueError):
        return None
    if not pid or not _alive(pid) or environ.get("GPS_DB_URL") == demo.get("GPS_DB_URL"):
        return None
    return (
        f"note: a demo is running (pid {pid}) on another store; run `. {ENV_FILE}` first "
        "to act on it"
    )
