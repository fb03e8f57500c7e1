"""The GPS modules stay pure: only ``gps.cli`` (an edge) may reach the store or a framework."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gps_dagster.gps

PACKAGE = Path(gps_dagster.gps.__file__).parent
FORBIDDEN = ("sqlalchemy", "dagster", "kubernetes", "gps_dagster.store", "gps_dagster.engine", "gps_dagster.backends", "gps_dagster.cli")
PURE = sorted(p for p in PACKAGE.glob("*.py") if p.name != "cli.py")


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("path", PURE, ids=lambda p: p.name)
def test_pure_module_imports_no_adapter(path: Path) -> None:
    bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)}
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_check_sees_imports() -> None:
    assert "gps_dagster.store.db" in _imports(PACKAGE / "cli.py")
    assert len(PURE) >= 10
