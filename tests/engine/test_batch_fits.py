"""Acquires batched by one pass never promise one free GPU to two starts (issue 13).

``StepRunner`` previews a round's acquires in one core session and submits every fit together.
That is sound only when previews of a session count earlier fits as taken; the simulator's
session is a no-op on SQLite (and with faults declared), and a core without sessions counts
nothing. Regression: on SQLite four acquires for one free GPU were all submitted (one placed,
three left unschedulable) instead of one started and three waiting for capacity.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store

T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")
N = 4


def _pool() -> dict[str, Any]:
    deploys = [{"id": f"d{i}", "gpus_per_replica": 1, "state": "stopped"} for i in range(N)]
    return {
        "name": "fits",
        "nodes": [{"name": "n0", "gpus": 1}],
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


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fits.sqlite'}"
        return
    server = str(request.getfixturevalue("pg_server_url"))
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    name = f"f_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base, _, query = server.partition("?")
    yield f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_four_acquires_for_one_free_gpu_start_one_and_wait_three(url: str) -> None:
    clock = VirtualClock(T0)
    store = Store.open(url)
    pool = SimPool.create(store.engine, load_pool(_pool()), clock, replace=True)
    for i in range(N):
        store.apply_schedule(load_schedule(_schedule(i)), now=T0)
    store.set_gate("enforce", now=T0)
    engine = Engine(store, pool, clock, EngineConfig())
    engine.run_pass()  # the defaults hold: nothing to do
    clock.set(BOUNDARY)
    engine.run_pass()  # four plans opened and run in one batch
    starts = [o for o in pool.operation_log() if o.kind.value == "start"]
    states = sorted(a.state for a in store.list_actions())
    assert len(starts) == 1, starts
    assert states == ["accepted", "capacity_wait", "capacity_wait", "capacity_wait"], states
    waiting = sorted(s.phase for s in store.list_status())
    assert waiting.count("capacity_wait") == 3
