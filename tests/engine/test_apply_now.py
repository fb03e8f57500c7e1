"""apply-now (SPEC §5, R-DAG-6): a new attempt after the cause is fixed; 409 busy while the lock is
held."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gps_dagster.engine import Busy
from gps_dagster.engine.engine import LOCK_NAME
from gps_dagster.ports import DeployState
from gps_dagster.store.locks import advisory_key
from tests.engine.harness import (
    A,
    B,
    World,
    a_running_pool,
    cmp_pool,
    cmp_schedule,
    local,
    make_world,
    op_triples,
    run_for,
)

EVENING = local("2026-10-19T17:59:30")


def apply_now(w: World) -> None:
    w.engine.run_pass(schedule=w.spec.name, trigger="apply_now")


def test_apply_now_after_raising_the_quota_is_a_new_attempt_with_new_keys(sqlite_url: str) -> None:
    w = make_world(sqlite_url, schedule=cmp_schedule(), pool=cmp_pool(quota=5), start=EVENING)
    w.run_until(local("2026-10-19T18:03"))
    refused = w.status(B)
    assert refused.phase == "quota_refused"
    w.pool.set_project("chat", gpu_quota=16)
    run_for(w, 120)  # terminal: plain passes do not retry, even once the cause is gone
    assert w.status(B).phase == "quota_refused" and op_triples(w) == []

    apply_now(w)
    run_for(w, 300)
    attempt = f"/g{refused.target_generation + 1}/"
    triples = op_triples(w)
    assert [(d, k) for d, k, _ in triples] == [(A, "stop"), (B, "start")]
    assert all(attempt in key for _, _, key in triples)
    assert (
        w.status(B).phase == "converged"
        and w.status(B).target_generation == refused.target_generation + 1
    )
    assert w.deploy(B).state is DeployState.READY


def test_apply_now_on_a_converged_target_submits_nothing(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=local("2026-10-19T10:00"))
    w.tick(30)
    apply_now(w)
    assert op_triples(w) == []
    assert w.status(A).phase == "converged"


def test_apply_now_while_another_engine_holds_the_lease_is_busy_409(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    before = w.store.list_status()
    with w.store.lock(LOCK_NAME, holder="engine-other", now=w.clock.now(), ttl_s=120) as held:
        assert held.acquired
        with pytest.raises(Busy) as err:
            apply_now(w)
        assert err.value.http_status == 409 and err.value.reason == "busy"
        assert w.store.list_status() == before and op_triples(w) == []  # apply-now did nothing
        report = w.engine.run_pass()
    # A plain pass skips the steady sweep (busy) but still serves the 18:00 boundary, which
    # is due work shared between replicas by claims, not by the pass lock (issue 13).
    assert report.busy and [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]
    apply_now(w)  # the lease was given back: apply-now runs, and mutates nothing twice
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]


@pytest.mark.postgres
def test_apply_now_while_the_advisory_lock_is_held_is_busy_409(pg_url: str) -> None:
    w = make_world(pg_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    key = advisory_key(LOCK_NAME)
    with w.store.engine.connect() as other:  # another replica's dedicated lock connection
        assert (
            other.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar() is True
        )
        other.commit()
        with pytest.raises(Busy) as err:
            apply_now(w)
        assert err.value.http_status == 409
        assert op_triples(w) == []
        other.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        other.commit()
    apply_now(w)
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]
