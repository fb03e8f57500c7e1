"""Adapter harnesses for the Core contract suite.

The suite talks to a ``Core`` through the port only; what it cannot do
through the port (load a pool, move time, inject a fault, add a foreign
workload) goes through a ``Harness``. The Kubernetes adapter's harness
(``tests/k8s/cluster.py``) builds the same pools on a real control plane, with a
virtual clock driving the fake kubelets, and runs the same suite.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal, Protocol

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim.memory import MemoryPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, PoolSpec
from gps_dagster.ports import Core
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository

T0 = datetime(2026, 10, 19, 10, 0, tzinfo=UTC)  # Mon 17:00 +07


class Harness(Protocol):
    clock: VirtualClock

    def load(self, spec: PoolSpec) -> Core: ...
    def advance(self, seconds: float) -> None: ...
    def eventually(self, check: Callable[[], object], *, within_s: float) -> None:
        """``check`` holds ``within_s`` seconds from now: on a virtual clock exactly then; on the
        real node at some point of a bounded wait (the kubelet's timing is its own)."""
        ...

    def inject(self, fault: FaultSpec) -> None: ...
    def add_foreign(
        self, workload_id: str, gpus: int, kind: Literal["static", "intruder"]
    ) -> None: ...
    def remove_foreign(self, workload_id: str) -> None: ...
    def mutations(self, deploy_id: str) -> int:
        """How many mutations the adapter applied to the deploy (for exactly-once proofs)."""
        ...

    def close(self) -> None: ...


class SimHarness:
    def __init__(self, db_url: str) -> None:
        self.engine = create_db_engine(db_url)
        self.clock = VirtualClock(T0)
        self.sim: SimPool | None = None

    def load(self, spec: PoolSpec) -> Core:
        ledger = ReservationRepository.migrated(self.engine) if spec.reservations else None
        self.sim = SimPool.create(self.engine, spec, self.clock, ledger=ledger)
        return self.sim

    @property
    def pool(self) -> SimPool:
        assert self.sim is not None
        return self.sim

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def eventually(self, check: Callable[[], object], *, within_s: float) -> None:
        at_the_instant(self, check, within_s)

    def inject(self, fault: FaultSpec) -> None:
        self.pool.inject_fault(fault)

    def add_foreign(self, workload_id: str, gpus: int, kind: Literal["static", "intruder"]) -> None:
        self.pool.add_foreign(workload_id, gpus, kind=kind)

    def remove_foreign(self, workload_id: str) -> None:
        self.pool.remove_foreign(workload_id)

    def mutations(self, deploy_id: str) -> int:
        return sum(1 for op in self.pool.operation_log() if op.deploy_id == deploy_id)

    def close(self) -> None:
        self.engine.dispose()


class MemoryHarness(SimHarness):
    """``MemoryPool`` (the simulated pool in memory) with the simulator's driver surface; the
    reservation ledger is the store's, on ``db_url`` (as ``simulate`` wires it)."""

    def __init__(self, db_url: str) -> None:
        super().__init__(db_url)
        self.memory: MemoryPool | None = None

    def load(self, spec: PoolSpec) -> Core:
        ledger = ReservationRepository.migrated(self.engine) if spec.reservations else None
        self.memory = MemoryPool.create(spec, self.clock, ledger=ledger)
        return self.memory

    @property
    def pool(self) -> MemoryPool:  # type: ignore[override]
        assert self.memory is not None
        return self.memory


def at_the_instant(harness: Harness, check: Callable[[], object], within_s: float) -> None:
    """A virtual clock's ``eventually``: exactly ``within_s`` later, ``check`` holds."""
    harness.advance(within_s)
    assert check(), f"not so {within_s} s later"


def _k8s(db_url: str) -> Harness:
    from tests.k8s.cluster import K8sHarness  # imports kubernetes only when the cluster runs

    return K8sHarness(db_url)


def _fake(db_url: str) -> Harness:
    from fake_harness import FakeHarness  # imports this module (T0): built on first use

    return FakeHarness(db_url)


def _real_node(db_url: str) -> Harness:
    from tests.k8s.real_harness import RealNodeHarness  # needs the real node (GPS_TEST_REAL_NODE)

    return RealNodeHarness(db_url)


ADAPTERS = {
    "sim": SimHarness,
    "sim-memory": MemoryHarness,
    "k8s": _k8s,
    "fake": _fake,
    "real-node": _real_node,
}
