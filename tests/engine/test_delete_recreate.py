"""Delete, then create again under the same name: the new schedule starts clean (issue 25 #4).

The deleted incarnation's plans and steps stay as history, but they must not collide with the
new one's: a schedule re-created at version 1 derived the same transition ids and idempotency
keys as the deleted one's (``engine/keys.py``), so its plan was taken for one already opened and
nothing was planned. A re-created schedule continues the name's version sequence instead.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from tests.engine.night_fleet import night_pool, night_schedule

T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")


def world(url: str) -> tuple[Store, SimPool, VirtualClock, Engine]:
    clock = VirtualClock(T0)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(night_pool(1)), clock)
    store.apply_schedule(load_schedule(night_schedule(0)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    engine = Engine(store, pool, clock, EngineConfig(holder="solo"))
    engine.run_pass()
    return store, pool, clock, engine


def run_for(engine: Engine, clock: VirtualClock, seconds: int) -> None:
    for _ in range(seconds // 2):
        engine.run_pass()
        clock.advance(2)


@pytest.mark.postgres
def test_a_schedule_deleted_and_created_again_plans_its_intent_again(pg_url: str) -> None:
    store, pool, clock, engine = world(pg_url)
    clock.set(BOUNDARY)
    run_for(engine, clock, 300)  # the night swap converges: d0-a stopped, d0-b running
    assert (pool.get_deploy("d0-a").state.value, pool.get_deploy("d0-b").state.value) == (
        "STOPPED",
        "READY",
    )
    assert store.delete_schedule("s0000", now=clock.now()).version == 1
    # unmanaged now, an operator swaps the pair back by hand
    a, b = pool.get_deploy("d0-a"), pool.get_deploy("d0-b")
    pool.start("d0-a", etag=a.etag, idempotency_key="operator/start-a")
    pool.stop("d0-b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="operator/stop-b")
    run_for(engine, clock, 300)
    # created again, same name, same targets: the night intent must be planned again
    again = store.apply_schedule(load_schedule(night_schedule(0)), now=clock.now())
    assert again.version == 2  # the name's version sequence goes on: new ids, new keys
    run_for(engine, clock, 400)
    assert (pool.get_deploy("d0-a").state.value, pool.get_deploy("d0-b").state.value) == (
        "STOPPED",
        "READY",
    )
    statuses = store.list_status()
    assert {(s.phase, s.schedule_version) for s in statuses} == {("converged", 2)}
    starts = [a for a in store.list_actions(deploy_id="d0-b") if a.step == "start"]
    assert [(a.schedule_version, a.state) for a in starts] == [(1, "converged"), (2, "converged")]


@pytest.mark.postgres
def test_delete_ends_the_schedules_pending_apply_now_requests(pg_url: str) -> None:
    store, _, clock, _ = world(pg_url)
    request = store.request_apply_now("s0000", now=clock.now())
    store.delete_schedule("s0000", now=clock.now() + timedelta(seconds=1))
    assert store.get_apply_now(request).state != "pending"
    assert request not in [r.id for r in store.pending_apply_now()]
