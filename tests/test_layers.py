"""The layer contract (STYLE.md §8): import-linter contracts plus a clock scan.

The import rules live in ``pyproject.toml`` (``[tool.importlinter]``) and run in ``make lint``.
These tests run the same contracts on the real import graph, and again on the graph with one
forbidden import injected, so deleting or loosening a contract fails here. The clock scan is ours:
import rules cannot see a read of the current instant inside the pure domain.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest
from importlinter import configuration
from importlinter.application import use_cases

PKG = Path(__file__).resolve().parents[1] / "gps_dagster"
ROOT = PKG.parent
CLOCK_CALLS = {
    "now",
    "utcnow",
    "today",
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "process_time",
}


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


@pytest.fixture(scope="module")
def contracts() -> tuple[object, grimp.ImportGraph]:
    configuration.configure()
    use_cases._register_contract_types(
        options := use_cases.read_user_options(str(ROOT / "pyproject.toml"))
    )
    graph = grimp.build_graph("gps_dagster", include_external_packages=True, cache_dir=None)
    return options, graph


def broken(
    contracts: tuple[object, grimp.ImportGraph], extra: tuple[str, str] | None = None
) -> list[str]:
    options, graph = contracts
    graph = copy.deepcopy(graph)
    if extra is not None:
        graph.add_import(
            importer=extra[0], imported=extra[1], line_number=1, line_contents="injected"
        )
    report = use_cases._build_report(
        graph=graph,
        graph_building_duration=0,
        user_options=options,
        limit_to_contracts=(),
        show_timings=False,
        verbose=False,
    )
    return sorted(
        contract.name for contract, check in report.get_contracts_and_checks() if not check.kept
    )


def test_the_package_keeps_every_contract(contracts: tuple[object, grimp.ImportGraph]) -> None:
    assert broken(contracts) == []


@pytest.mark.parametrize(
    ("importer", "imported", "contract"),
    [
        ("gps_dagster.domain.spec", "gps_dagster.store.db", "Layers"),
        ("gps_dagster.domain.evaluator", "sqlalchemy", "The domain is pure"),
        ("gps_dagster.domain.evaluator", "os", "The domain is pure"),
        ("gps_dagster.engine.steps", "gps_dagster.backends.sim", "The engine never names"),
        ("gps_dagster.engine.steps", "gps_dagster.clocks", "The engine never names"),
        (
            "gps_dagster.engine.step_calls",
            "gps_dagster.store.repository",
            "The engine is typed by store Protocols",
        ),
        ("gps_dagster.engine.metrics", "sqlalchemy", "The engine is typed by store Protocols"),
        ("gps_dagster.engine.steps", "gps_dagster.store.records", None),
        (
            "gps_dagster.backends.sim.reserved",
            "gps_dagster.store.reservations",
            "The adapters never import the store",
        ),
        (
            "gps_dagster.backends.k8s.gps",
            "gps_dagster.store",
            "The adapters never import the store",
        ),
        ("gps_dagster.backends.sim.ledger", "gps_dagster.ports", None),
        ("gps_dagster.store.db", "dagster", "Only dagster_defs imports dagster"),
        ("gps_dagster.engine.engine", "kubernetes", "Only backends.k8s imports kubernetes"),
        ("gps_dagster.dagster_defs.assets", "gps_dagster.cli.dagster_client", "Layers"),
        ("gps_dagster.backends.k8s.core", "gps_dagster.testing.k8s", "The product never imports"),
        ("gps_dagster.cli.main", "gps_dagster.demo.main", "The product never imports"),
        ("gps_dagster.runtime", "gps_dagster.testing", "The product never imports"),
        ("gps_dagster.engine.steps", "gps_dagster.testing.fake_core", "The product never imports"),
        (
            "gps_dagster.store.repository",
            "gps_dagster.testing.fake_pool",
            "The product never imports",
        ),
        ("gps_dagster.testing.k8s.pools", "gps_dagster.backends.k8s.names", None),
        ("gps_dagster.demo.main", "gps_dagster.cli.dagster_client", None),
        ("gps_dagster.domain.planner", "gps_dagster.domain.gps.witness", None),
    ],
)
def test_each_contract_catches_its_violation(
    contracts: tuple[object, grimp.ImportGraph], importer: str, imported: str, contract: str | None
) -> None:
    names = broken(contracts, (importer, imported))
    if contract is None:
        assert names == []  # a legal import inside the domain stays legal
    else:
        assert any(n.startswith(contract) for n in names), names


def test_a_cycle_between_siblings_is_caught(contracts: tuple[object, grimp.ImportGraph]) -> None:
    # domain.gps already imports domain.documents; the reverse edge closes a cycle.
    assert "No cycles between sibling packages or modules" in broken(
        contracts, ("gps_dagster.domain.documents", "gps_dagster.domain.gps.reservations")
    )


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


# the samples below spell the calls from parts, so this file holds no clock read even as text
NOW, TODAY, TIME, WALL = "now", "today", "time", "Wall" + "Clock"


def test_the_clock_scan_catches_clock_reads(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "import datetime\nfrom time import monotonic\n"
        f"x = datetime.datetime.{NOW}()\ny = datetime.date.{TODAY}()\nz = open('f')\n"
    )
    assert sorted(clock_reads(sample)) == [(2, "monotonic"), (3, "now"), (4, "today"), (5, "open")]


WALL_CLOCK_ATTRS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "time_ns"),
}
WALL_CLOCK_NAMES = {"WallClock"}


def wall_clock_reads(path: Path) -> list[tuple[int, str]]:
    """Calls that read the real "now" (``WALL_CLOCK_ATTRS`` of datetime, date and time, and a bare
    ``WallClock``), under any import alias (the ``now`` of an injected clock, ``time.monotonic()``
    for a process deadline and ``WallClock(source=...)`` are not)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    alias = {"datetime": "datetime", "date": "date", "time": "time"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in node.names:
                if name.name in alias and name.asname:
                    alias[name.asname] = name.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        bare = not node.args and not node.keywords  # WallClock(source=...) is an injected clock
        if isinstance(fn, ast.Attribute):
            value = fn.value
            owner = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
            owner = alias.get(owner, owner)
            if (owner, fn.attr) in WALL_CLOCK_ATTRS:
                found.append((node.lineno, f"{owner}.{fn.attr}"))
        elif isinstance(fn, ast.Name) and fn.id in WALL_CLOCK_NAMES and bare:
            found.append((node.lineno, fn.id))
    return found


TESTS = Path(__file__).resolve().parent
EDGES = [*files(PKG / "cli"), *files(PKG / "dagster_defs")]


OUTSIDE_E2E = [p for p in files(TESTS) if "e2e" not in p.relative_to(TESTS).parts]


@pytest.mark.parametrize("path", OUTSIDE_E2E, ids=lambda p: str(p.relative_to(TESTS)))
def test_tests_never_read_the_wall_clock(path: Path) -> None:
    """No test outcome depends on the wall clock: tests inject clocks (GPS_CLOCK for the CLI)."""
    assert wall_clock_reads(path) == [], f"{path.relative_to(ROOT)} reads the wall clock"


@pytest.mark.parametrize("path", EDGES, ids=lambda p: str(p.relative_to(PKG)))
def test_the_cli_and_dagster_layers_take_their_clock_from_the_runtime(path: Path) -> None:
    assert wall_clock_reads(path) == [], f"{path.relative_to(ROOT)} reads the wall clock itself"
    where = path.relative_to(ROOT)
    assert "gps_dagster.clocks" not in path.read_text(), f"{where} builds a clock itself"


def test_the_wall_clock_scan_catches_wall_clock_reads(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "import datetime, time\nfrom datetime import datetime as dt\n"
        f"a = datetime.datetime.{NOW}()\nb = dt.{NOW}(UTC)\nc = time.{TIME}()\nd = {WALL}()\n"
        f"e = clock.{NOW}()\nf = time.monotonic()\ng = {WALL}(source=lambda: 0.0)\n"
        f"h = datetime.date.{TODAY}()\n"
    )
    assert sorted(wall_clock_reads(sample)) == [
        (3, "datetime.now"),
        (4, "datetime.now"),
        (5, "time.time"),
        (6, "WallClock"),
        (10, "date.today"),
    ]
