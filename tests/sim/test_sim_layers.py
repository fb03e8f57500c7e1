"""The port and the pool file stay free of adapter libraries (SQLAlchemy, Dagster, Kubernetes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "gps_dagster"
FORBIDDEN = ("sqlalchemy", "dagster", "kubernetes", "gps_dagster.backends", "gps_dagster.store")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", ["ports.py", "clocks.py", "domain/pool.py"])
def test_no_adapter_imports(module: str) -> None:
    bad = {
        n
        for n in imported(ROOT / module)
        if n.split(".")[0] in FORBIDDEN or n.startswith(FORBIDDEN)
    }
    assert not bad, f"{module} imports {bad}"


def test_the_simulator_does_not_import_dagster() -> None:
    for path in (ROOT / "backends" / "sim").glob("*.py"):
        assert not {n for n in imported(path) if n.startswith(("dagster", "kubernetes"))}, path
