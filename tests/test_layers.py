"""The layer contract (STYLE.md §8), checked on the source with ``ast``.

* ``gps_dagster.domain`` is pure: no framework, database, network, process or
  OS-level I/O imports, and it never reads the clock (time is a parameter).
* ``gps_dagster.ports`` stays free of sqlalchemy, dagster and kubernetes.
* Only ``gps_dagster/dagster_defs`` imports dagster; only
  ``gps_dagster/backends/k8s`` imports kubernetes.

A static scan rather than import-linter: no extra tool, and it also catches
clock reads, which import rules cannot.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "gps_dagster"
DOMAIN_FORBIDDEN = {
    "dagster", "kubernetes", "sqlalchemy", "alembic", "psycopg", "psycopg2", "requests", "httpx", "urllib3",
    "socket", "ssl", "subprocess", "os", "shutil", "pathlib", "tempfile", "io", "glob", "urllib", "http",
    "asyncio", "selectors", "multiprocessing", "threading", "signal", "sys", "time", "random",
}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
               "process_time"}


def files(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if p.is_file()) if under.exists() else []


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level module) of every absolute import."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def family(module: str) -> str:
    """dagster_k8s -> dagster, psycopg2 -> psycopg2."""
    return "dagster" if module.startswith("dagster") else module


def test_the_scan_sees_the_package() -> None:
    assert len(files(PKG / "domain")) >= 8
    assert any(m == "pydantic" for p in files(PKG / "domain") for _, m in imports(p))


@pytest.mark.parametrize("path", files(PKG / "domain"), ids=lambda p: p.name)
def test_domain_imports_no_io_or_framework(path: Path) -> None:
    bad = [(line, m) for line, m in imports(path) if family(m) in DOMAIN_FORBIDDEN]
    assert bad == [], f"{path.relative_to(PKG.parent)} imports {bad}"


def clock_reads(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute) and fn.attr in CLOCK_CALLS:
                found.append((node.lineno, fn.attr))
            elif isinstance(fn, ast.Name) and fn.id in {"open", "input"}:
                found.append((node.lineno, fn.id))
        elif isinstance(node, ast.ImportFrom) and node.module in {"time", "datetime"}:
            found += [(node.lineno, a.name) for a in node.names if a.name in CLOCK_CALLS]
    return found


@pytest.mark.parametrize("path", files(PKG / "domain"), ids=lambda p: p.name)
def test_domain_never_reads_the_clock_or_files(path: Path) -> None:
    assert clock_reads(path) == [], f"{path.relative_to(PKG.parent)} reads the clock or a file"


def test_the_clock_scan_catches_clock_reads(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import datetime\nfrom time import monotonic\nx = datetime.datetime.now()\n"
                      "y = datetime.date.today()\nz = open('f')\n")
    assert sorted(clock_reads(sample)) == [(2, "monotonic"), (3, "now"), (4, "today"), (5, "open")]


def test_ports_stay_framework_free() -> None:
    for path in [PKG / "ports.py", *files(PKG / "ports")]:
        if path.exists():
            bad = [m for _, m in imports(path) if family(m) in {"sqlalchemy", "dagster", "kubernetes"}]
            assert bad == [], f"{path.name} imports {bad}"


@pytest.mark.parametrize(
    ("library", "allowed"),
    [("dagster", PKG / "dagster_defs"), ("kubernetes", PKG / "backends" / "k8s")],
)
def test_only_one_place_imports_each_framework(library: str, allowed: Path) -> None:
    offenders = [
        f"{p.relative_to(PKG.parent)}:{line}"
        for p in files(PKG)
        if allowed not in p.parents
        for line, m in imports(p)
        if family(m) == library
    ]
    assert offenders == []
