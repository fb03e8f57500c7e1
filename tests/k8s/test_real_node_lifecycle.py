"""``tools/with_k8s.py`` stops and cleans the real node on a signal (issue 19).

Starts its own control plane and node (about 40 s), sends SIGTERM once the node is Ready, and
checks that no process of the node (kubelet, containerd, shims, holder) survives and that its
directory and pod cgroups are gone.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cmdlines() -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                out.append(
                    (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
    return out


def test_sigterm_stops_and_cleans_the_real_node() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPS_TEST_")}
    proc = subprocess.Popen(
        [sys.executable, "tools/with_k8s.py", "--", "sleep", "600"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    node_dir = None
    lines = []
    deadline = time.monotonic() + 240
    while node_dir is None and time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line:
            break
        lines.append(line)
        m = re.search(r"real node \S+ Ready in [\d.]+ s \((?P<dir>[^)]+)\)", line)
        if m:
            node_dir = Path(m["dir"])
    try:
        assert node_dir is not None, "the node never came up: " + "".join(lines)[-2000:]
        assert any(str(node_dir) in c and "kubelet" in c for c in _cmdlines())
        tag = (
            f"{proc.pid % 4096:x}"  # realnode.start names the cgroup root and bridge after the pid
        )
        assert (Path("/sys/fs/cgroup/pids") / f"gps-node-{tag}").is_dir()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()  # not left to the garbage collector (a ResourceWarning)
    left = [c for c in _cmdlines() if str(node_dir) in c]
    assert left == [], f"processes of the node survived: {left}"
    assert not node_dir.exists()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/gps-node-{tag}")), "pod cgroups left behind"
