"""A replica SIGKILLed mid-storm: survivors take its claims over within the lease (issue 25 #1).

Three replicas in three processes on PostgreSQL, default settings: the victim claims its chunk
of a 120-schedule boundary and freezes inside its first stop; the test kills it with a real
SIGKILL. The two survivors serve the rest of the storm at once (claims come in bounded chunks,
so one replica never holds a whole storm) and the victim's share once its 15 s lease has run
out (nothing renews a dead replica's claims) — not after the two minutes the old TTL took.
Every stop reaches the core exactly once. Virtual clocks: no test waits out a lease.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from gps_dagster.store.scale_tables import schedule_due
from tests.engine.night_fleet import night_pool, night_schedule
from tests.engine.takeover_worker import survivor, victim

N = 120
T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")
LEASE_S = EngineConfig().claim_ttl_s


def setup_storm(url: str) -> Store:
    clock = VirtualClock(T0)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(night_pool(N)), clock)
    for i in range(N):
        store.apply_schedule(load_schedule(night_schedule(i)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    Engine(store, pool, clock, EngineConfig(holder="setup")).run_pass()  # first plans: no steps
    return store


def stops_accepted(store: Store) -> dict[str, list[datetime]]:
    """Schedule name → when the core accepted each stop of its release target."""
    ops = SimPool.open(store.engine, "storm", VirtualClock(BOUNDARY + timedelta(hours=1)))
    out: dict[str, list[datetime]] = {}
    for o in ops.operation_log():
        if o.kind.value == "stop":
            out.setdefault(f"s{int(o.deploy_id[1:].split('-')[0]):04d}", []).append(o.created_at)
    return out


@pytest.mark.postgres
def test_survivors_take_a_killed_replicas_claims_within_the_lease(
    pg_url: str, tmp_path: Path
) -> None:
    assert LEASE_S <= 15.0
    store = setup_storm(pg_url)
    ctx = multiprocessing.get_context("spawn")
    ready = tmp_path / "victim-ready"
    proc = ctx.Process(target=victim, args=(pg_url, "storm", BOUNDARY.isoformat(), str(ready)))
    proc.start()
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.is_alive() and time.monotonic() < deadline, "the victim never reached a stop"
        time.sleep(0.05)
    d = schedule_due
    with store.engine.connect() as conn:
        held = dict(
            conn.execute(
                sa.select(d.c.name, d.c.claimed_until).where(d.c.claimed_by == "victim")
            ).all()
        )
    assert 0 < len(held) <= EngineConfig().due_batch < N  # a bounded chunk, not the storm
    assert set(held.values()) == {BOUNDARY + timedelta(seconds=LEASE_S)}
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)  # kill -9, mid-pass
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL

    instants = [(BOUNDARY + timedelta(seconds=s)).isoformat() for s in range(2, 24, 2)]
    logs = run_survivors(pg_url, instants, tmp_path)

    accepted = stops_accepted(store)
    assert len(accepted) == N and {len(v) for v in accepted.values()} == {1}  # each stop once
    submits = {n: v[0] for n, v in accepted.items()}
    others = {n: at for n, at in submits.items() if n not in held}
    assert max(others.values()) <= BOUNDARY + timedelta(seconds=2)  # served at once, in chunks
    taken = [submits[n] for n in held]
    assert min(taken) >= BOUNDARY + timedelta(seconds=LEASE_S)  # the dead claims were respected
    assert max(taken) <= BOUNDARY + timedelta(seconds=LEASE_S + 2)  # ... then taken at once
    assert all(not p["errors"] for log in logs for p in log["passes"]), logs
    assert sum(1 for log in logs if any(p["steps"] for p in log["passes"])) == 2, logs


def run_survivors(url: str, instants: list[str], tmp: Path) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    outs = [tmp / f"survivor-{k}.json" for k in range(2)]
    procs = [
        ctx.Process(
            target=survivor, args=(url, "storm", f"survivor-{k}", instants, barrier, str(o))
        )
        for k, o in enumerate(outs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    logs = [json.loads(o.read_text()) for o in outs]
    for entry in logs:
        assert entry["error"] is None, entry["error"]
    return logs
