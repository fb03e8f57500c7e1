"""The reviewed list of contract cases FakeCore does not run
(``fake_exclusions.FAKE_CORE_EXCLUDED``).

Each entry must name a real case of the suite, its reason must hold (FakeCore refuses the pool
the case loads, so it could never answer it kindly), and only the fake's parametrisation of a
listed case is deselected — the simulator and the Kubernetes adapter still run it.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from contract_pools import reserved
from fake_exclusions import FAKE_CORE_EXCLUDED, excluded_on_fake

from gps_dagster.clocks import VirtualClock
from gps_dagster.testing import FakeCore, NotModelled

HERE = Path(__file__).parent


def test_every_excluded_case_exists_and_has_a_reason() -> None:
    for case, reason in FAKE_CORE_EXCLUDED.items():
        file, func = case.split("::")
        module = importlib.import_module(file.removesuffix(".py"))
        assert callable(getattr(module, func, None)), f"{case} names no contract case"
        assert reason.strip(), f"{case} is excluded without a reason"


def test_the_excluded_cases_are_exactly_the_reservation_surface_fakecore_refuses() -> None:
    module = importlib.import_module("test_core_reservations")
    cases = {f"test_core_reservations.py::{n}" for n in dir(module) if n.startswith("test_")}
    assert set(FAKE_CORE_EXCLUDED) == cases
    with pytest.raises(NotModelled, match="reservations"):
        FakeCore(reserved(), VirtualClock(datetime(2026, 10, 19, tzinfo=UTC)))


def item(params: tuple[str, str], case: str) -> SimpleNamespace:
    file, func = case.split("::")
    return SimpleNamespace(
        callspec=SimpleNamespace(params={"harness": params}),
        path=HERE / file,
        originalname=func,
        name=f"{func}[x]",
    )


def test_only_the_fakes_parametrisation_of_a_listed_case_is_deselected() -> None:
    listed = next(iter(FAKE_CORE_EXCLUDED))
    assert excluded_on_fake(item(("fake", "memory"), listed))  # type: ignore[arg-type]
    assert not excluded_on_fake(item(("sim", "sqlite"), listed))  # type: ignore[arg-type]
    assert not excluded_on_fake(item(("k8s", "postgres"), listed))  # type: ignore[arg-type]
    other = "test_core_mutations.py::test_replayed_key_returns_the_same_operation_and_mutates_once"
    assert not excluded_on_fake(item(("fake", "memory"), other))  # type: ignore[arg-type]
