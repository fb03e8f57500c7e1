"""The running demo's settings, for a second terminal: ``. var/demo/env``.

``make demo`` writes ``var/demo/env`` (shell ``export`` lines: the demo's store, pool, Dagster
instance, Dagster URL, API URL and token, the venv on ``PATH``) when its UI is up, and removes
it when it stops. Sourcing it makes every command of the README act on the demo — the
``gps-dagster`` CLI, ``dagster asset materialize`` and ``dg launch`` (same ``DAGSTER_HOME``).
A ``gps-dagster`` command typed without it while a demo runs prints a one-line hint.
"""

# Decisions embodied here (docs/decisions.md):
# * “The demo and a second terminal share one instance through `var/demo/env`”

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from gps_dagster.cli.demo_hint import ENV_FILE, PID_VARIABLE, hint, read

__all__ = ["ENV_FILE", "PID_VARIABLE", "hint", "read", "write"]


def write(path: Path, env: Mapping[str, str], *, venv_bin: Path) -> Path:
    """The env file: one ``export`` per setting, quoted for the shell."""
    lines = ["# the running gps_dagster demo: `. var/demo/env` in a second terminal"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append(f'export PATH={shlex.quote(str(venv_bin))}:"$PATH"')
    lines.append(f"export {PID_VARIABLE}={os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0600 from the first byte: the file holds the demo's admin token
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_TRUNC: set it
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path
