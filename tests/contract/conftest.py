"""The contract suite runs once per adapter and database: the simulator on SQLite and on
PostgreSQL, the simulator held in memory (``MemoryPool``, its reservation ledger on SQLite), the
Kubernetes adapter on the real control plane with fake nodes (its store on
PostgreSQL), the same adapter on the ONE real node (kubelet + containerd + the device plugin) —
minus the cases in ``real_node_exclusions.REAL_NODE_EXCLUDED``, whose pools do not fit one 4-GPU
node (``test_real_node_exclusions``) — and the in-memory ``FakeCore`` of the engine's fast tests,
minus the cases in ``fake_exclusions.FAKE_CORE_EXCLUDED``, the one reviewed list of what it
deliberately does not model (``test_fake_core_exclusions``)."""

# Decisions embodied here (docs/decisions.md):
# * “FakeCore is never kinder than the adapters”
# * “The contract suite on the real node: what fits one node”

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_harness import ADAPTERS, Harness
from fake_exclusions import excluded_on_fake
from real_node_exclusions import excluded_on_real_node

CASES = [
    ("sim", "sqlite"),
    ("sim", "postgres"),
    ("sim-memory", "sqlite"),
    ("k8s", "postgres"),
    ("real-node", "postgres"),
    ("fake", "memory"),
]


def _excluded(item: pytest.Item) -> bool:
    return excluded_on_fake(item) or excluded_on_real_node(item)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep = [i for i in items if not _excluded(i)]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if _excluded(i)])
        items[:] = keep


@pytest.fixture(scope="session")
def real_node(k8s_cluster: str) -> Iterator[str]:
    """The real node's name: ``tools/with_k8s.py``'s (``GPS_TEST_REAL_NODE``), else one started
    here (a missing prerequisite fails the test: never a skip)."""
    from gps_dagster.testing.k8s import realnode

    name = os.environ.get("GPS_TEST_REAL_NODE")
    if name:
        yield name
        return
    started = realnode.start(
        Path(k8s_cluster).parent / f"node-{os.getpid()}",
        Path(k8s_cluster),
        uuids=realnode.gpu_uuids(4),
    )
    os.environ.update(started.env())
    yield started.name
    for key in started.env():
        os.environ.pop(key, None)
    started.stop()


@pytest.fixture(params=CASES, ids=[f"{a}-{d}" for a, d in CASES])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    adapter, db = request.param
    if adapter == "k8s":
        request.getfixturevalue("k8s_cluster")
    if adapter == "real-node":
        request.getfixturevalue("real_node")
    db_url = (
        ""
        if db == "memory"
        else str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    )
    h = ADAPTERS[adapter](db_url)
    yield h
    h.close()
