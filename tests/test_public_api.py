"""The public faces are pinned: ``__all__`` of ports, engine, runtime and dagster_defs.

As httpx and temporal's SDK pin their exported names, a name added to or dropped from one of
these modules' ``__all__`` fails here until the list below is changed with it, in the same
commit, on purpose. The second check keeps ``__all__`` honest about its callers: everything the
repository imports *from* these modules by name (``from gps_dagster.ports import X``, or
``ports.X`` through a module alias) is either exported or a submodule, so nothing leans on a
private name that a refactor could drop silently.
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("gps_dagster", "tests", "bench", "tools")

PINNED: dict[str, list[str]] = {
    "gps_dagster.ports": [
        "AdmissionPreview",
        "AdmissionRefused",
        "AliasGuardUnavailable",
        "AliasInfo",
        "BatchingCore",
        "BillingRefused",
        "CapacityPreview",
        "Clock",
        "Core",
        "CoreError",
        "DeployControl",
        "DeployReads",
        "DeployState",
        "DeployView",
        "DeployWrites",
        "EtagMismatch",
        "Fits",
        "HolderRelease",
        "Insufficient",
        "NotFound",
        "Operation",
        "OperationKind",
        "OperationState",
        "Permanent",
        "Placement",
        "Preflight",
        "PreviewingReads",
        "QuotaRefused",
        "QuotaStatus",
        "ReservationBinding",
        "ReservationBook",
        "ReservationLedger",
        "StepCore",
        "Submission",
        "Transient",
        "Unsupported",
        "WitnessResult",
        "submit_each",
        "submit_one",
    ],
    "gps_dagster.engine": [
        "Busy",
        "Engine",
        "EngineConfig",
        "PassReport",
        "PlanRef",
        "StepOutcome",
        "StepRef",
    ],
    "gps_dagster.runtime": [
        "BACKENDS",
        "DEFAULT_POOL",
        "K8S_BURST",
        "K8S_QPS",
        "Runtime",
        "Settings",
        "SettingsInvalid",
        "build_clock",
        "build_runtime",
        "clock_from_env",
        "db_url",
        "load_pool_spec",
        "open_store",
        "settings_from_env",
    ],
    "gps_dagster.dagster_defs": [
        "GpsResource",
        "Intervals",
        "StaticRuntime",
        "build_definitions",
        "names",
    ],
}


@pytest.mark.parametrize("module", sorted(PINNED))
def test_all_is_pinned(module: str) -> None:
    exported = importlib.import_module(module).__all__
    assert sorted(exported) == PINNED[module], f"{module}.__all__ changed: update PINNED on purpose"
    assert len(set(exported)) == len(exported), f"{module}.__all__ lists a name twice"


@pytest.mark.parametrize("module", sorted(PINNED))
def test_every_exported_name_exists(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"


def imported_names(path: Path) -> Iterator[tuple[str, str, int]]:
    """(module, name, line) of each name the file takes from a pinned module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            for a in node.names:
                if node.module in PINNED:
                    yield node.module, a.name, node.lineno
                elif f"{node.module}.{a.name}" in PINNED:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in PINNED and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield aliases[node.value.id], node.attr, node.lineno


def undeclared(module: str, name: str) -> bool:
    """A name taken from ``module`` that is neither exported nor one of its submodules."""
    mod = importlib.import_module(module)
    if name in mod.__all__:
        return False
    try:
        return not isinstance(importlib.import_module(f"{module}.{name}"), types.ModuleType)
    except ImportError:
        return True


def test_callers_use_only_exported_names() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}.{name}"
        for top in SOURCES
        for path in sorted((ROOT / top).rglob("*.py"))
        for module, name, line in imported_names(path)
        if undeclared(module, name)
    ]
    assert not found, "imported but not in __all__ (export it or import it from its module):\n" + (
        "\n".join(found)
    )


def test_the_caller_scan_sees_a_private_import(tmp_path: Path) -> None:
    """The scan is not vacuous: a private name taken from a pinned module is reported."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from gps_dagster.ports import _private\nfrom gps_dagster import engine as e\ne._x\n"
    )
    got = {(m, n) for m, n, _ in imported_names(probe)}
    assert got == {("gps_dagster.ports", "_private"), ("gps_dagster.engine", "_x")}
    assert undeclared("gps_dagster.ports", "_private")
    assert not undeclared("gps_dagster.engine", "operations")  # a submodule
