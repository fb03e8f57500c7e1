"""A batch session (``SimPool.batch``, PostgreSQL) serves calls as they would be served alone.

Inside a session the pool keeps deploy rows read in the transaction and counts operation
numbers in memory (issue 13): a row a mutation wrote, or a savepoint undid, must be read as
it now is, and operation numbers stay unique and contiguous across sessions.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.ports import Transient
from gps_dagster.store.db import create_db_engine

T0 = datetime(2026, 10, 19, 8, 0, tzinfo=UTC)


@pytest.fixture
def sim(pg_url: str):  # type: ignore[no-untyped-def]
    doc = {
        "name": "batch",
        "nodes": [{"name": "n1", "gpus": 4}],
        "deploys": [
            {"id": "a", "gpus_per_replica": 1, "state": "running"},
            {"id": "b", "gpus_per_replica": 1, "state": "stopped"},
        ],
    }
    engine = create_db_engine(pg_url)
    yield SimPool.create(engine, load_pool(doc), VirtualClock(T0), replace=True)
    engine.dispose()


def test_a_second_mutation_of_a_deploy_in_one_session_sees_the_first(sim: SimPool) -> None:
    with sim.batch():
        stop = sim.stop(
            "a",
            etag=sim.get_deploy("a").etag,
            allow_aliased_downtime=False,
            idempotency_key="k-stop",
        )
        assert sim.get_deploy("a").etag == stop.etag_after  # the written row, not the one read
        start = sim.start("a", etag=stop.etag_after, idempotency_key="k-start")
        other = sim.start("b", etag=sim.get_deploy("b").etag, idempotency_key="k-b")
    assert sim.get_deploy("a").etag == start.etag_after
    after = sim.stop(
        "b", etag=other.etag_after, allow_aliased_downtime=False, idempotency_key="k-b2"
    )
    ids = [op.id for op in sim.operation_log()]
    assert ids == [stop.id, start.id, other.id, after.id]
    assert ids == [f"op-{n:06d}" for n in range(1, 5)]  # numbered once each, across the session


def test_a_mutation_undone_by_its_savepoint_leaves_no_trace_in_the_session(
    sim: SimPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = sim.get_deploy("b")

    def lost(*_args: object, **_kwargs: object) -> None:  # after the start wrote row and op
        raise Transient("the answer was lost", reason="response_lost")

    with sim.batch():
        stop = sim.stop(
            "a",
            etag=sim.get_deploy("a").etag,
            allow_aliased_downtime=False,
            idempotency_key="k-stop",
        )
        with monkeypatch.context() as m:
            m.setattr(sim, "_live", lost)
            with pytest.raises(Transient):
                sim.start("b", etag=before.etag, idempotency_key="k-lost")
        assert sim.get_deploy("b").etag == before.etag  # the undone write is not served
        again = sim.start("b", etag=before.etag, idempotency_key="k-again")
    assert (
        [op.id for op in sim.operation_log()] == [stop.id, again.id] == ["op-000001", "op-000002"]
    )
    assert again.etag_after == sim.get_deploy("b").etag
