"""The product image ``make test`` built with buildah (``tools/image/build_image.py``).

Inspected and run (``buildah run``, chroot isolation) as what the chart relies on: a non-root
user, no ENTRYPOINT (K8sRunLauncher passes ``dagster api execute_run …`` as args), the venv
first on PATH, ``definitions.py`` at /opt/gps, every pinned constraint honoured, the entry
points and the package data (rbac.yaml, migrations) present.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helm.helm_support import REPO

STORAGE = ["--storage-driver", "vfs"]


def _cache() -> Path:
    root = os.environ.get("GPS_IMAGE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gps_dagster" / "image"
    )
    return Path(root)


def _buildah(*args: str) -> str:
    done = subprocess.run(
        ["buildah", *STORAGE, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"buildah {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image of this tree's inputs (``make image``; not the last one built on the machine:
    another work tree may have built since)."""
    ref = f"localhost/gps-dagster:0.1.0-{_inputs_hash()}"
    with open(_cache() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # no build or prune while we read the image
        listing = _buildah("images", "--format", "{{.Name}}:{{.Tag}}").split()
        if ref not in listing:
            raise RuntimeError(f"{ref} missing: run `make image` (make test does) first")
        yield ref


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    name = _buildah("from", "--pull-never", image).strip().splitlines()[-1]
    yield name
    _buildah("rm", name)


def _run(container: str, *cmd: str) -> str:
    return _buildah("run", "--isolation", "chroot", container, "--", *cmd)


def _inputs_hash() -> str:
    spec = importlib.util.spec_from_file_location(
        "build_image", REPO / "tools/image/build_image.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.inputs_hash())


def test_the_image_holds_this_trees_package(container: str) -> None:
    """The wheel inside is this tree's code, not a cached older build."""
    site = _run(
        container,
        "python",
        "-c",
        "import gps_dagster, os; print(os.path.dirname(gps_dagster.__file__))",
    ).strip()
    for rel in ("runtime.py", "engine/engine.py", "backends/k8s/rbac.yaml"):
        local = hashlib.sha256((REPO / "gps_dagster" / rel).read_bytes()).hexdigest()
        assert _run(container, "sha256sum", f"{site}/{rel}").split()[0] == local, rel
    # issue 22 §3: the test machinery and the demo are not in the image
    left = _run(
        container,
        "sh",
        "-c",
        f"ls -d {site}/testing {site}/demo "
        f"{site}/backends/k8s/fake {site}/backends/k8s/controlplane.py 2>/dev/null; true",
    )
    assert left.strip() == "", left


def test_the_image_config_is_what_the_chart_and_the_run_launcher_expect(image: str) -> None:
    config = json.loads(_buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
    assert config["User"] == "10001:10001"
    assert not config.get("Entrypoint")
    assert config["WorkingDir"] == "/opt/gps"
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/gps/venv/bin:")
    assert env["DAGSTER_HOME"] == "/opt/dagster/dagster_home"


def test_it_runs_non_root_with_the_entry_points_and_the_code_location(container: str) -> None:
    assert _run(container, "id", "-u").strip() == "10001"
    assert _run(container, "gps-dagster", "--version").strip() == "gps-dagster, version 0.1.0"
    for exe in ("dagster", "dagster-webserver", "dagster-daemon"):
        assert (
            _run(container, "sh", "-c", f"command -v {exe}").strip() == f"/opt/gps/venv/bin/{exe}"
        )
    local = hashlib.sha256((REPO / "definitions.py").read_bytes()).hexdigest()
    assert _run(container, "sha256sum", "/opt/gps/definitions.py").split()[0] == local
    probe = (
        "from gps_dagster.backends.k8s import rbac; from gps_dagster.store import migrate; "
        "import dagster_k8s, dagster_postgres, psycopg2; print(sorted(rbac.rules()))"
    )
    out = _run(container, "python", "-c", probe)
    assert "gps-dagster-deploys" in out
    refused = subprocess.run(
        [
            "buildah",
            *STORAGE,
            "run",
            "--isolation",
            "chroot",
            container,
            "--",
            "touch",
            "/opt/gps/venv/x",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0  # the application files are not the user's to change


def test_every_pinned_constraint_is_installed_at_its_version(container: str) -> None:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.lower().replace("_", "-")] = version.strip()
    installed = {}
    for line in _run(container, "pip", "freeze").splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            installed[name.lower().replace("_", "-")] = version.strip()
    assert installed["dagster"] == "1.13.27" and installed["dagster-k8s"] == "0.29.27"
    wrong = {n: (v, pins[n]) for n, v in installed.items() if n in pins and pins[n] != v}
    assert wrong == {}
    assert "pytest" not in installed  # the dev extras stay out of the image
