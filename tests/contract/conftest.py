"""The contract suite runs once per adapter and database: the simulator on SQLite and on
PostgreSQL, the Kubernetes adapter on the real control plane (its store on PostgreSQL), and the
in-memory ``FakeCore`` of the engine's fast tests — minus the cases in ``fake_exclusions.FAKE_CORE_EXCLUDED``,
the one reviewed list of what it deliberately does not model (``test_fake_core_exclusions``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contract_harness import ADAPTERS, Harness
from fake_exclusions import excluded_on_fake

CASES = [("sim", "sqlite"), ("sim", "postgres"), ("k8s", "postgres"), ("fake", "memory")]

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
