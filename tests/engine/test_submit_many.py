"""``Core.submit_many``: the batch lane's one core call, and each adapter's form of it.

* the engine submits a boundary's single-call steps with ONE ``submit_many`` call (it used to
  call ``start`` once per step inside core sessions);
* the simulator's form: results in order, a refused submission changes nothing of the others,
  a replayed key returns the earlier operation and mutates nothing;
* the Kubernetes form (``MutationsMixin.submit_many``): at most ``write_concurrency`` writes at
  once, and that many really overlap; results in order, an error is that submission's answer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from gps_dagster.backends.k8s.writes import MutationsMixin
from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import (
    EtagMismatch,
    Operation,
    OperationKind,
    OperationState,
    Submission,
    Transient,
)
from gps_dagster.store import Store

T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")
N = 4


def _pool() -> dict[str, Any]:
    deploys = [{"id": f"d{i}", "gpus_per_replica": 1, "state": "stopped"} for i in range(N)]
    return {
        "name": "many",
        "nodes": [{"name": "n0", "gpus": N}],
        "deploys": deploys,
        "sim": {"record_usage": False},
    }


def _schedule(i: int) -> dict[str, Any]:
    return {
        "name": f"s{i}",
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [{"model_deploy_id": f"d{i}", "default_state": "stopped"}],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 22 * * *",
                "duration": "6h",
                "states": [{"model_deploy_id": f"d{i}", "desired_state": "running"}],
            }
        ],
    }


class Counting:
    """The real pool; counts ``submit_many`` calls and single ``start`` calls made around it."""

    def __init__(self, pool: SimPool) -> None:
        self._pool = pool
        self.batches: list[int] = []
        self.single_starts = 0

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        self.batches.append(len(submissions))
        return self._pool.submit_many(submissions)

    def start(self, deploy_id: str, **kw: Any) -> Operation:
        self.single_starts += 1
        return self._pool.start(deploy_id, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def test_a_boundary_submits_its_starts_with_one_submit_many_call(tmp_path: Any) -> None:
    clock = VirtualClock(T0)
    store = Store.open(f"sqlite:///{tmp_path / 'many.sqlite'}")
    pool = SimPool.create(store.engine, load_pool(_pool()), clock, replace=True)
    for i in range(N):
        store.apply_schedule(load_schedule(_schedule(i)), now=T0)
    store.set_gate("enforce", now=T0)
    core = Counting(pool)
    engine = Engine(store, core, clock, EngineConfig())  # type: ignore[arg-type]
    engine.run_pass()
    clock.set(BOUNDARY)
    engine.run_pass()
    starts = [o for o in pool.operation_log() if o.kind is OperationKind.START]
    assert len(starts) == N
    assert sum(core.batches) == N and core.single_starts == 0, (core.batches, core.single_starts)
    assert {a.state for a in store.list_actions()} <= {"accepted", "done"}


def test_sim_submit_many_answers_each_submission_as_its_single_call(tmp_path: Any) -> None:
    clock = VirtualClock(T0)
    store = Store.open(f"sqlite:///{tmp_path / 'sim.sqlite'}")
    pool = SimPool.create(store.engine, load_pool(_pool()), clock, replace=True)
    e0, e1 = pool.get_deploy("d0").etag, pool.get_deploy("d1").etag
    first = pool.submit_many(
        [
            Submission(OperationKind.START, "d0", e0, "k0"),
            Submission(OperationKind.START, "d1", "stale", "k1"),
        ]
    )
    assert isinstance(first[0], Operation) and isinstance(first[1], EtagMismatch)
    assert pool.get_deploy("d1").etag == e1  # the refused one changed nothing
    again = pool.submit_many(
        [
            Submission(OperationKind.START, "d0", e0, "k0"),  # a resubmit after a lost answer
            Submission(OperationKind.START, "d1", e1, "k1"),
        ]
    )
    assert isinstance(again[0], Operation) and again[0].id == first[0].id
    assert isinstance(again[1], Operation)
    assert [o.idempotency_key for o in pool.operation_log()] == ["k0", "k1"]  # once each


class Writes(MutationsMixin):
    """``MutationsMixin.submit_many`` over stand-in single writes that must overlap ``k`` at a
    time (a barrier of ``k``: fewer workers break it) and never more."""

    def __init__(self, k: int) -> None:
        self.write_concurrency = k
        self.barrier = threading.Barrier(k, timeout=10)
        self.lock = threading.Lock()
        self.running = self.peak = 0

    def start(self, deploy_id: str, *, etag: str, idempotency_key: str) -> Operation:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            self.barrier.wait()
            if deploy_id.endswith("x"):
                raise Transient("throttled", reason="api_unavailable")
            return Operation(
                deploy_id,
                deploy_id,
                OperationKind.START,
                idempotency_key,
                OperationState.ACCEPTED,
                etag,
                T0,
            )
        finally:
            with self.lock:
                self.running -= 1


@pytest.mark.parametrize("k", [1, 4])
def test_k8s_submit_many_runs_write_concurrency_writes_at_once(k: int) -> None:
    core = Writes(k)
    ids = [f"d{i}" + ("x" if i == 5 else "") for i in range(4 * k + 4)]
    subs = [Submission(OperationKind.START, d, "e", f"k-{d}") for d in ids]
    results = core.submit_many(subs)
    assert core.peak == k
    assert [r.deploy_id if isinstance(r, Operation) else "error" for r in results] == [
        "error" if d.endswith("x") else d for d in ids
    ]
    assert isinstance(results[5], Transient)
