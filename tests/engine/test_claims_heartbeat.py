"""Due claims on PostgreSQL: a heartbeat keeps a live replica's, a claim never hides an accepted
step from observation (issue 25 #1). ``test_takeover`` kills a replica; these are in process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import Operation, Submission, submit_each
from gps_dagster.store import Store
from tests.engine.night_fleet import night_pool, night_schedule

T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")


def storm(url: str, n: int) -> tuple[Store, SimPool, VirtualClock]:
    clock = VirtualClock(T0)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(night_pool(n)), clock)
    for i in range(n):
        store.apply_schedule(load_schedule(night_schedule(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    Engine(store, pool, clock, EngineConfig(holder="setup")).run_pass()
    clock.set(BOUNDARY)
    return store, pool, clock


class SlowStops:
    """The pool, except that the first stop lasts 20 s of the shared clock: meanwhile another
    replica tries to claim the schedules (``seen``: what it got), once this replica's heartbeat
    had the time to beat (or 2 s of wall time without one)."""

    def __init__(self, inner: SimPool, store: Store, clock: VirtualClock) -> None:
        self.inner, self.store, self.clock = inner, store, clock
        self.seen: list[str] | None = None

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        return submit_each(self, submissions)  # every call through this wrapper

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def stop(self, deploy_id: str, **kw: Any) -> Any:
        if self.seen is None:
            self.clock.advance(20)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and not self._renewed():
                time.sleep(0.02)
            got = self.store.claim_due(holder="other", now=self.clock.now(), limit=50, lease_s=15)
            self.seen = [c.name for c in got]
        return self.inner.stop(deploy_id, **kw)

    def _renewed(self) -> bool:
        rows = self.store.due_rows(["s0000"])
        until = rows["s0000"].claimed_until
        return until is not None and until > self.clock.now()


@pytest.mark.postgres
def test_a_live_replica_keeps_its_claims_past_the_lease(pg_url: str) -> None:
    store, pool, clock = storm(pg_url, 3)
    core = SlowStops(pool, store, clock)
    config = EngineConfig(holder="live", claim_ttl_s=0.3)  # a beat every 0.1 s of wall time
    Engine(store, core, clock, config).run_pass()  # type: ignore[arg-type]
    assert core.seen == []  # 20 s into a 0.3 s lease, nothing was free to take
    assert {a.state for a in store.list_actions() if a.order == "release"} == {"accepted"}
    assert all(r.claimed_by is None for r in store.due_rows(["s0000", "s0001"]).values())


@pytest.mark.postgres
def test_a_claim_held_elsewhere_does_not_hide_accepted_steps(pg_url: str) -> None:
    store, pool, clock = storm(pg_url, 2)
    engine = Engine(store, pool, clock, EngineConfig(holder="alive"))
    engine.run_pass()
    assert {a.state for a in store.list_actions() if a.order == "release"} == {"accepted"}
    # a replica claims both schedules, then dies (or is busy): its lease still runs
    dead = store.claim_schedules(["s0000", "s0001"], holder="dead", now=clock.now(), lease_s=600)
    assert len(dead) == 2
    timings = load_pool(night_pool(1)).sim.timings
    clock.advance(timings.stop_grace_s + 1)  # the stops have converged in the pool
    report = engine.run_pass()
    releases = [a for a in store.list_actions() if a.order == "release"]
    assert {a.state for a in releases} == {"converged"}, report
    assert {s.phase for s in store.list_status() if s.deploy_id.endswith("-a")} == {"converged"}
    # the claims themselves are untouched: planning stays the holder's until its lease ends
    assert {r.claimed_by for r in store.due_rows(["s0000", "s0001"]).values()} == {"dead"}
