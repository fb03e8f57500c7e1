"""Installed as users install it (issue 20 §4): the wheel and the sdist, never the repository.

The wheel and the sdist are built from a copy of the work tree's files (``python -m build``,
the standard frontend, with its isolated build environment), each installed into a fresh venv
*outside* the repository, and driven from an empty project folder: ``gps-dagster validate`` and
``gps-dagster simulate`` on the packaged seed example, the default pool path, and Dagster
loading the packaged code location (``dagster definitions validate -m …``, then ``dagster dev
-m …`` answering HTTP 200).

Dependencies: the venv sees the pinned third-party packages of the test's own venv through a
``.pth`` to a folder of links to them — every entry but ``gps_dagster`` itself, whose only copy
in the new venv is the one pip installed from the wheel (asserted: ``gps_dagster.__file__``).
This keeps the test offline and fast; the image build (``make image``) does the full
``pip install`` of the wheel with its dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from gps_dagster.demo.devserver import REPO, free_port, group_members

pytestmark = pytest.mark.slow
SITE = Path(sysconfig.get_paths()["purelib"])
OURS = ("gps_dagster", "__editable__", "__editable___gps_dagster")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    out = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert out.returncode == 0, (
        f"{cmd}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout


def _source_copy(dest: Path) -> Path:
    """The files git knows of (tracked, and new ones not ignored): what a release builds from."""
    listed = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO
    ).split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pkg")
    src = _source_copy(root / "src")
    out = root / "dist"
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(src)], src)
    return out


def _deps_folder(root: Path) -> Path:
    deps = root / "deps"
    deps.mkdir()
    for entry in SITE.iterdir():
        if entry.name.startswith(OURS) or entry.name == "__pycache__":
            continue
        (deps / entry.name).symlink_to(entry)
    return deps


def _venv(root: Path, deps: Path) -> Path:
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], root)
    py = venv / "bin" / "python"
    purelib = _run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root
    )
    (Path(purelib.strip()) / "zz_pinned_deps.pth").write_text(f"{deps}\n")
    return venv


def _user_env(venv: Path, project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPS_", "DAGSTER_", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["DAGSTER_HOME"] = str(project / "dagster_home")
    (project / "dagster_home").mkdir(exist_ok=True)
    return env


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("user")
    assert not root.resolve().is_relative_to(REPO)
    venv = _venv(root, _deps_folder(root))
    (wheel,) = dist.glob("*.whl")
    _run([str(venv / "bin" / "pip"), "install", "--no-deps", "--no-index", str(wheel)], root)
    project = root / "project"
    project.mkdir()
    return venv, project


def test_the_wheel_carries_the_seed_example_and_no_tests(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gps_dagster/examples/seed-pool-10.yaml" in names
    assert "gps_dagster/examples/seed-schedule.json" in names
    assert "gps_dagster/store/migrations/env.py" in names or any(
        n.startswith("gps_dagster/store/migrations/") for n in names
    )
    assert not [n for n in names if n.startswith(("tests/", "bench/")) or "conftest" in n]
    # issue 22 §3: the test machinery (fake kubelet, test control plane) and the demo stay home
    assert "gps_dagster/backends/k8s/core.py" in names  # the product's adapter ships
    assert not [n for n in names if n.startswith(("gps_dagster/testing/", "gps_dagster/demo/"))]
    assert not [n for n in names if "/fake/" in n or n.endswith("controlplane.py")]
    for name in ("seed-pool-10.yaml", "seed-schedule.json"):  # the repository's, byte for byte
        shipped = zipfile.ZipFile(wheel).read(f"gps_dagster/examples/{name}")
        assert shipped == (REPO / "examples" / name).read_bytes()


def test_validate_and_simulate_the_packaged_seed_from_an_empty_folder(
    installed: tuple[Path, Path],
) -> None:
    venv, project = installed
    env = _user_env(venv, project)
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import gps_dagster; print(gps_dagster.__file__)"],
        project,
        env,
    )
    assert Path(where.strip()).is_relative_to(venv)  # the wheel's copy, not the repository's
    for absent in ("gps_dagster.testing", "gps_dagster.demo"):  # nothing installed imports them
        probe = f"import importlib.util as u; print(u.find_spec({absent!r}))"
        assert _run([str(venv / "bin" / "python"), "-c", probe], project, env).strip() == "None"
    from_runtime = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from gps_dagster.runtime import DEFAULT_POOL; print(DEFAULT_POOL)",
        ],
        project,
        env,
    ).strip()
    assert Path(from_runtime).is_relative_to(venv) and Path(from_runtime).is_file()
    cli = str(venv / "bin" / "gps-dagster")
    schedule = _run([cli, "examples", "--path", "seed-schedule.json"], project, env).strip()
    pool = _run([cli, "examples", "--path", "seed-pool-10.yaml"], project, env).strip()
    assert ": ok — schedule" in _run([cli, "validate", schedule], project, env)
    out = _run(
        [
            cli,
            "simulate",
            schedule,
            "--pool",
            pool,
            "--format",
            "json",
            "--from",
            "2026-10-19T00:00:00+07:00",
            "--to",
            "2026-10-20T00:00:00+07:00",
        ],
        project,
        env,
    )
    report = json.loads(out)
    kinds = {(o["deploy"], o["kind"]) for o in report["operations"]}
    assert ("md-llama70b", "start") in kinds and ("md-qwen32b", "stop") in kinds


def test_dagster_loads_the_packaged_code_location_from_an_empty_folder(
    installed: tuple[Path, Path],
) -> None:
    venv, project = installed
    env = _user_env(venv, project)
    py = str(venv / "bin" / "python")
    module = "gps_dagster.dagster_defs.location"
    _run([py, "-m", "dagster", "definitions", "validate", "-m", module], project, env)
    assert (project / "var" / "gps.sqlite").is_file()  # the default store, under the project
    port = free_port()
    log = (project / "dev.log").open("wb")
    proc = subprocess.Popen(
        [py, "-m", "dagster", "dev", "-m", module, "-h", "127.0.0.1", "-p", str(port)],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert _answers(f"http://127.0.0.1:{port}/server_info", proc, timeout=240), (
            project / "dev.log"
        ).read_text()[-3000:]
    finally:
        _stop_group(proc)
        log.close()


def _answers(url: str, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM then SIGKILL the whole group (dagster dev may ignore SIGTERM, FACTS.md)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and group_members(proc.pid):
            time.sleep(0.2)
        if not group_members(proc.pid):
            break
    proc.wait(timeout=5)


def test_the_sdist_installs_and_validates(
    dist: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("sdist-user")
    venv = _venv(root, _deps_folder(root))
    (sdist,) = dist.glob("*.tar.gz")
    _run([str(venv / "bin" / "pip"), "install", "--no-deps", str(sdist)], root)
    project = root / "project"
    project.mkdir()
    env = _user_env(venv, project)
    cli = str(venv / "bin" / "gps-dagster")
    schedule = _run([cli, "examples", "--path", "seed-schedule.json"], project, env).strip()
    assert Path(schedule).is_relative_to(venv)
    assert ": ok — schedule" in _run([cli, "validate", schedule], project, env)
