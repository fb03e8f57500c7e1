"""The contract suite runs once per adapter and database: the simulator on SQLite and on
PostgreSQL, the Kubernetes adapter on the real control plane (its store on PostgreSQL), and the
in-memory ``FakeCore`` of the engine's fast tests — minus the cases in ``FAKE_CORE_EXCLUDED``,
the one reviewed list of what it deliberately does not model (``test_fake_core_exclusions``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contract_harness import ADAPTERS, Harness

CASES = [("sim", "sqlite"), ("sim", "postgres"), ("k8s", "postgres"), ("fake", "memory")]

_NO_RESERVATIONS = "GPU reservations (VRAM budgets, bound placement, holders): FakeCore refuses such pools at load"
FAKE_CORE_EXCLUDED: dict[str, str] = {
    "test_core_reservations.py::test_admission_preview_agrees_with_start_and_changes_nothing": _NO_RESERVATIONS,
    "test_core_reservations.py::test_a_bound_deploy_reports_its_binding_and_is_witnessed_when_ready": _NO_RESERVATIONS,
    "test_core_reservations.py::test_unbound_work_stays_off_reserved_gpus": _NO_RESERVATIONS,
    "test_core_reservations.py::test_reservation_deploys_lists_the_bound_deploys": _NO_RESERVATIONS,
}
"""Contract case (file::function) -> why FakeCore is not run on it. Deselected, never skipped."""


def excluded_on_fake(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("harness") != ("fake", "memory"):
        return False
    name = getattr(item, "originalname", item.name)
    return f"{item.path.name}::{name}" in FAKE_CORE_EXCLUDED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep = [i for i in items if not excluded_on_fake(i)]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if excluded_on_fake(i)])
        items[:] = keep


@pytest.fixture(params=CASES, ids=[f"{a}-{d}" for a, d in CASES])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    adapter, db = request.param
    if adapter == "k8s":
        request.getfixturevalue("k8s_cluster")
    db_url = "" if db == "memory" else str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    h = ADAPTERS[adapter](db_url)
    yield h
    h.close()
