"""The test control plane fails loudly without its binaries (never a skip), and with_k8s says
how to build them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gps_dagster.testing.k8s import controlplane as cp

ROOT = Path(__file__).resolve().parents[2]


def test_missing_binaries_are_an_error_naming_the_build_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_K8S_CACHE", str(tmp_path / "empty"))
    with pytest.raises(cp.ControlPlaneError) as err:
        cp.binaries()
    assert "kube-apiserver" in str(err.value) and cp.BUILD_SCRIPT in str(err.value)


def test_with_k8s_exits_1_and_runs_nothing_without_the_binaries(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = {"GPS_K8S_CACHE": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "with_k8s.py"), "--", "touch", str(marker)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and not marker.exists()
    assert "build_control_plane.sh" in done.stderr


def test_the_cached_binaries_are_found(k8s_cluster: str) -> None:
    found = cp.binaries()
    assert set(found) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
