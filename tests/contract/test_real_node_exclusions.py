"""The reviewed list of contract cases the real node does not run (``real_node_exclusions``).

Each entry must name a real case of the suite; its reason must name the pool the case loads, and
that pool must still not fit one 4-GPU real node (``fit_problems``) — a pool made to fit puts its
cases back on the node. Every case not listed runs there, and only the real node's
parametrisation of a listed case is deselected: the other adapters still run it.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from types import SimpleNamespace

import contract_pools
from real_node_exclusions import REAL_NODE, REAL_NODE_EXCLUDED, excluded_on_real_node

from tests.k8s.real_harness import fit_problems

HERE = Path(__file__).parent
CASE_FILES = sorted(p.name for p in HERE.glob("test_core_*.py"))


def contract_cases() -> dict[str, object]:
    found = {}
    for file in CASE_FILES:
        module = importlib.import_module(file.removesuffix(".py"))
        found |= {f"{file}::{n}": getattr(module, n) for n in dir(module) if n.startswith("test_")}
    return found


def test_every_excluded_case_exists_and_loads_the_pool_its_reason_names() -> None:
    cases = contract_cases()
    for case, reason in REAL_NODE_EXCLUDED.items():
        assert case in cases, f"{case} names no contract case"
        pool = reason.split(":")[0]
        assert f"harness.load({pool}(" in inspect.getsource(cases[case]), (
            f"{case} does not load {pool}"
        )  # type: ignore[arg-type]


def test_every_excluded_pool_still_does_not_fit_the_real_node() -> None:
    pools = {reason.split(":")[0] for reason in REAL_NODE_EXCLUDED.values()}
    assert pools == {"seed10", "split16", "accounts", "reserved"}
    for pool in pools:
        assert fit_problems(getattr(contract_pools, pool)()), (
            f"{pool} fits the real node: run its cases there"
        )


def test_the_cases_left_are_the_one_node_cases_and_their_pool_fits() -> None:
    left = set(contract_cases()) - set(REAL_NODE_EXCLUDED)
    assert left and all(c.startswith("test_core_one_node.py::") for c in left)
    assert fit_problems(contract_pools.solo4()) == []


def test_fit_problems_names_each_reason_a_pool_cannot_run_there() -> None:
    assert fit_problems(contract_pools.seed10()) == [
        "2 nodes",
        "node hgx-01 has 8 GPUs",
        "a 60 s publish lag (the kubelet has none)",
    ]
    split = fit_problems(contract_pools.split16())
    assert "3 nodes" in split and "wide spans 2 nodes" in split
    assert "GPU reservations on the pool's own UUIDs (not the device plugin's)" in fit_problems(
        contract_pools.reserved()
    )
    assert fit_problems(contract_pools.solo4(), gpus=3) == ["node solo has 4 GPUs"]


def item(params: tuple[str, str], case: str) -> SimpleNamespace:
    file, func = case.split("::")
    return SimpleNamespace(
        callspec=SimpleNamespace(params={"harness": params}),
        path=HERE / file,
        originalname=func,
        name=f"{func}[x]",
    )


def test_only_the_real_nodes_parametrisation_of_a_listed_case_is_deselected() -> None:
    listed = next(iter(REAL_NODE_EXCLUDED))
    assert excluded_on_real_node(item(REAL_NODE, listed))  # type: ignore[arg-type]
    for other in (("sim", "sqlite"), ("k8s", "postgres"), ("fake", "memory")):
        assert not excluded_on_real_node(item(other, listed))  # type: ignore[arg-type]
    one_node = "test_core_one_node.py::test_one_node_a_start_is_ready_only_once_loaded"
    assert not excluded_on_real_node(item(REAL_NODE, one_node))  # type: ignore[arg-type]
