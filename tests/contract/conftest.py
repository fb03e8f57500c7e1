"""The contract suite runs once per adapter and database: the simulator on SQLite and on
PostgreSQL, the Kubernetes adapter on the real control plane (its store on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contract_harness import ADAPTERS, Harness

CASES = [("sim", "sqlite"), ("sim", "postgres"), ("k8s", "postgres")]


@pytest.fixture(params=CASES, ids=[f"{a}-{d}" for a, d in CASES])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    adapter, db = request.param
    if adapter == "k8s":
        request.getfixturevalue("k8s_cluster")
    db_url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    h = ADAPTERS[adapter](db_url)
    yield h
    h.close()
