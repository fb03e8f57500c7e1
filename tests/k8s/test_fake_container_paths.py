"""The fake kubelet's path mapping (``testing/k8s/containers.py``), without a cluster.

A regression: with the repository (and so the venv) under /tmp — a clone in /tmp, as CI may
have — the program found on the image's PATH was remapped a second time into the pod's
``/tmp`` emptyDir, and every chart pod failed with FileNotFoundError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gps_dagster.testing.k8s.containers import Cluster, LocalImage, resolve


def _pod(command: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "containers": [
                {
                    "name": "c",
                    "command": command,
                    "args": ["--state", "/tmp/state", "/opt/gps/definitions.py"],
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
        },
    }


def test_a_program_found_on_path_under_tmp_is_not_remapped_into_the_tmp_mount(
    tmp_path: Path,
) -> None:
    assert str(tmp_path).startswith("/tmp/")  # the situation of the defect
    venv = tmp_path / "repo" / ".venv"
    (venv / "bin").mkdir(parents=True)
    program = venv / "bin" / "gps-dagster"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    image = LocalImage(
        workdir="/opt/gps",
        env={"PATH": "/opt/gps/venv/bin:/usr/bin:/bin"},
        paths={"/opt/gps/venv": str(venv), "/opt/gps": str(tmp_path / "repo")},
    )
    spec = resolve(
        None,  # type: ignore[arg-type]  # emptyDir only: no API call
        _pod(["gps-dagster", "engine", "run"]),
        image,
        root=tmp_path / "pod",
        cluster=Cluster("https://127.0.0.1:1", "/nonexistent/ca.crt"),
    )
    tmp_mount = spec.mounts["/tmp"]
    assert spec.argv[0] == str(program)
    # container paths are still mapped: /tmp into the pod's volume, /opt/gps to the repository
    assert spec.argv[4] == tmp_mount + "/state"
    assert spec.argv[5] == str(tmp_path / "repo" / "definitions.py")
    assert spec.cwd == str(tmp_path / "repo")
    assert spec.env["PATH"].split(":")[0] == str(venv / "bin")


def test_an_absolute_container_command_is_mapped_once(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    image = LocalImage(paths={"/opt/gps/venv": str(venv)})
    spec = resolve(
        None,  # type: ignore[arg-type]
        _pod(["/opt/gps/venv/bin/dagster", "api", "grpc"]),
        image,
        root=tmp_path / "pod",
        cluster=Cluster("https://127.0.0.1:1", "/nonexistent/ca.crt"),
    )
    assert spec.argv[0] == str(venv / "bin" / "dagster")
