"""Build the product image (``Containerfile``) with Debian's buildah, offline, as CI does.

No Docker engine and no registry of base images are reachable here (FACTS.md), so:

1. a Debian bookworm root filesystem with python3 + venv comes from ``debootstrap`` (Debian
   mirror, ~35 s, cached in ``~/.cache/gps_dagster/image/rootfs``) and becomes the base image
   ``localhost/gps-dagster-base:bookworm`` (``tools/image/Containerfile.base``: FROM scratch +
   COPY), built once;
2. ``pip wheel -c constraints.txt`` builds the product wheel (from a copy of the files git
   knows of, never a work tree's stale ``build/``) and downloads its pinned
   dependencies into the build context (the build itself needs no index);
3. ``buildah bud --isolation chroot --storage-driver vfs --build-arg BASE=<that base>`` runs the
   Containerfile (RUN steps and pip install included) and tags
   ``localhost/gps-dagster:<version>`` and ``localhost/gps-dagster:<version>-<inputs hash>``.

The inputs hash covers the Containerfile, definitions.py, dagster.yaml, constraints.txt,
pyproject.toml and the package's files: an unchanged tree reuses the image (a second build takes the
wheel step only). The built reference is written to ``image.ref`` in the cache; the last three
product images are kept (work trees of one machine share the storage). Missing tools are installed
with apt (root), any failure exits 1 with the step's output: nothing that needs the image is ever
skipped.
"""

# Decisions embodied here (docs/decisions.md):
# * “The image is built offline in `make test`”

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "localhost/gps-dagster"
BASE = "localhost/gps-dagster-base:bookworm"
STORAGE = ["--storage-driver", "vfs"]
MIRROR = "http://deb.debian.org/debian"
INPUTS = ("Containerfile", "definitions.py", "dagster.yaml", "constraints.txt", "pyproject.toml")


def cache_dir() -> Path:
    root = os.environ.get("GPS_IMAGE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gps_dagster" / "image"
    )
    return Path(root)


def run(cmd: list[str], *, what: str, cwd: Path | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        out = (done.stdout + done.stderr)[-4000:]
        raise SystemExit(f"build_image: {what} failed (exit {done.returncode}):\n{out}")
    return done.stdout


def ensure_tools() -> None:
    missing = [t for t in ("buildah", "debootstrap") if shutil.which(t) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(
            f"build_image: {missing} missing; install: apt-get install {' '.join(missing)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"build_image: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")


def have_image(ref: str) -> bool:
    done = subprocess.run(
        ["buildah", *STORAGE, "inspect", "--type", "image", ref], capture_output=True, check=False
    )
    return done.returncode == 0


def base_image(cache: Path) -> None:
    if have_image(BASE):
        return
    rootfs = cache / "rootfs"
    if not (rootfs / "usr" / "bin" / "python3").exists():
        shutil.rmtree(rootfs, ignore_errors=True)
        partial = cache / "rootfs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(partial),
                MIRROR,
            ],
            what="debootstrap of the Debian base",
        )
        partial.rename(rootfs)
    with tempfile.TemporaryDirectory(prefix="gps-base-", dir=cache) as tmp:
        ctx = Path(tmp)
        run(["cp", "-al", str(rootfs), str(ctx / "rootfs")], what="context of the base image")
        run(
            [
                "buildah",
                *STORAGE,
                "bud",
                "--isolation",
                "chroot",
                "-t",
                BASE,
                "-f",
                str(REPO / "tools" / "image" / "Containerfile.base"),
                str(ctx),
            ],
            what="buildah bud of the base image",
        )


def inputs_hash() -> str:
    digest = hashlib.sha256()
    files = [REPO / f for f in INPUTS] + [Path(__file__).resolve()]  # how it is built, too
    files += sorted(
        p for p in (REPO / "gps_dagster").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    raise SystemExit("build_image: no version in pyproject.toml")


def source_copy(dest: Path) -> Path:
    """The files git knows of (tracked, and new ones not ignored): what a release builds from.

    Never the work tree itself: setuptools' ``build/lib`` keeps files the tree no longer has (a
    moved module stayed in the image after it left the package), and an untracked scratch file
    would ship too."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"build_image: git ls-files failed (a checkout is needed):\n{done.stderr}")
    for name in filter(None, done.stdout.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def product_image(cache: Path, ref: str, plain: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gps-image-", dir=cache) as tmp:
        ctx = Path(tmp)
        src = source_copy(ctx / "src")
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "-c",
                str(REPO / "constraints.txt"),
                "--wheel-dir",
                str(ctx / "wheels"),
                str(src),
            ],
            what="pip wheel",
        )
        shutil.rmtree(src)  # not part of the image's build context
        for name in INPUTS[:4]:
            shutil.copy(REPO / name, ctx / name)
        run(
            [
                "buildah",
                *STORAGE,
                "bud",
                "--isolation",
                "chroot",
                "--build-arg",
                f"BASE={BASE}",
                "-t",
                ref,
                "-t",
                plain,
                "-f",
                str(ctx / "Containerfile"),
                str(ctx),
            ],
            what="buildah bud of the product image",
        )


KEEP = 3
"""Product images kept: the last ones built. Work trees of one machine share buildah's storage,
so an image another tree's tests are about to read is not removed under them."""


def prune(cache: Path, keep: str) -> None:
    history = cache / "image.refs"
    built = [r for r in (history.read_text().split() if history.is_file() else []) if r != keep]
    recent = [*built, keep][-KEEP:]
    history.write_text("".join(r + "\n" for r in recent))
    listing = run(
        ["buildah", *STORAGE, "images", "--format", "{{.Name}}:{{.Tag}}"], what="buildah images"
    )
    for line in listing.split():
        if line.startswith(NAME + ":") and line not in recent and "-" in line.rsplit(":", 1)[1]:
            subprocess.run(["buildah", *STORAGE, "rmi", line], capture_output=True, check=False)
    subprocess.run(["buildah", *STORAGE, "rmi", "--prune"], capture_output=True, check=False)


def main() -> int:
    ensure_tools()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two worktrees' `make test` share buildah's storage
        base_image(cache)
        plain = f"{NAME}:{version()}"
        ref = f"{plain}-{inputs_hash()}"
        if have_image(ref):
            run(["buildah", *STORAGE, "tag", ref, plain], what="buildah tag")
            print(f"image {ref} is up to date")
        else:
            product_image(cache, ref, plain)
            prune(cache, keep=ref)
            print(f"built image {ref}")
        (cache / "image.ref").write_text(ref + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
