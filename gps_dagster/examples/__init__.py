"""The seed example shipped in the wheel (a user installs the wheel, not the repository).

``seed-schedule.json`` and ``seed-pool-10.yaml`` are byte-for-byte the repository's
``examples/`` files (``tests/packaging`` checks it): the default simulated pool is this copy,
so an installed ``gps-dagster`` never points into a source tree. ``gps-dagster examples``
prints their paths.
"""

# Decisions embodied here (docs/decisions.md):
# * “The wheel ships the seed example; the default pool is the packaged copy”

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
SUFFIXES = (".json", ".yaml", ".yml")


def packaged() -> dict[str, Path]:
    """File name → path of every example shipped in the package."""
    return {p.name: p for p in sorted(HERE.iterdir()) if p.suffix in SUFFIXES}


def path(name: str) -> Path:
    """The path of one packaged example; a KeyError names the ones there are."""
    files = packaged()
    if name not in files:
        raise KeyError(f"no packaged example {name!r}; there are: {', '.join(files)}")
    return files[name]
