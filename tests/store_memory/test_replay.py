"""The memory store decides nothing differently: ``simulate`` gives the same report on both stores.

Each case replays an example through the production engine and the same simulated pool,
once on the SQL ``Store`` (SQLite) and once on ``MemoryStore`` (``memory_store=True``), and
compares the whole report: transitions with their steps, events, final status, the pool's
operations, GPU usage, boundary lags, passes. A store that fenced, superseded, closed a plan,
claimed or dated the due index differently changes at least one of them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.simulation import simulate
from tests.engine.harness import example

CASES = {
    "demo-30m": (
        "demo-schedule.json",
        "demo-pool.yaml",
        "2026-10-19T07:30:00+00:00",
        timedelta(minutes=30),
    ),
    "seed-1d": (
        "seed-schedule.json",
        "seed-pool-10.yaml",
        "2026-10-19T00:00:00+07:00",
        timedelta(days=1),
    ),
    "scenario2-1d": (
        "scenario2-schedule.json",
        "scenario2-reservations-pool.yaml",
        "2026-10-19T00:00:00+07:00",
        timedelta(days=1),
    ),
}


def replay(case: str, *, memory_store: bool) -> dict[str, Any]:
    schedule, pool, start, span = CASES[case]
    at = datetime.fromisoformat(start)
    rep = simulate(
        load_schedule(example(schedule)),
        load_pool(example(pool)),
        at,
        at + span,
        memory_store=memory_store,
        memory_pool=False,
    )  # the pool held at SQL
    return rep.as_dict()


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulate_reports_the_same_on_the_memory_store_as_on_sqlite(case: str) -> None:
    sql, memory = replay(case, memory_store=False), replay(case, memory_store=True)
    assert sql["transitions"], "the replay must open plans, or it proves nothing"
    assert any(s["state"] == "converged" for t in sql["transitions"] for s in t["steps"])
    different = [k for k in sql if sql[k] != memory[k]]
    assert not different, {k: (sql[k], memory[k]) for k in different}
    assert memory == sql


def test_an_engine_restart_after_a_crash_fault_replays_the_same_on_both_stores() -> None:
    """A ``crash`` fault kills the engine mid-pass: the new process waits out the dead one's
    lease on the pass lock, and takes over its plan, on either store alike."""
    pool = example("seed-pool-10.yaml")
    pool.setdefault("sim", {})["faults"] = [
        {"effect": "crash", "op": "start", "point": "before_commit"}
    ]
    start = datetime.fromisoformat("2026-10-19T06:00:00+07:00")
    reports = [
        simulate(
            load_schedule(example("seed-schedule.json")),
            load_pool(pool),
            start,
            start + timedelta(hours=14),
            memory_store=memory,
            memory_pool=False,
        ).as_dict()
        for memory in (False, True)
    ]
    sql, memory = reports
    assert [(r["op"], r["point"]) for r in sql["engine_restarts"]] == [("start", "before_commit")]
    assert memory == sql
