"""``simulate`` on ``MemoryPool`` gives the same report as on ``SimPool`` (same SQL store).

The in-memory pool exists to make ``simulate`` fast; it is only worth that if nothing a
report shows can tell the two apart: transitions with their steps, events, final status,
operations, the GPU usage history, downtime, idle GPU-seconds, the witness and engine
restarts. Four replays cover the timing rules (the demo's compressed swap every 4 minutes),
a day of the seed, reservations (scenario 2 with exclusive reservations and an intruder;
gpu42's time-sliced reservation, its VRAM admission and holder) and a ``crash`` fault (an engine
restart, the crashed call leaving nothing behind).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.simulation import simulate
from tests.engine.harness import SEED_MONDAY, example, seed_pool, seed_schedule
from tests.engine.test_simulation_regressions import with_faults

COMPARED = (
    "transitions",
    "events",
    "final_status",
    "operations",
    "gpu_usage",
    "downtime_seconds",
    "gpu_idle_seconds",
    "witness",
    "engine_restarts",
    "passes",
    "max_gpus_in_use",
    "boundary_lag_seconds",
    "ready_by",
)
H = timedelta(hours=1)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], datetime, datetime]] = {
    "demo-30m": (
        example("demo-schedule.json"),
        example("demo-pool.yaml"),
        SEED_MONDAY,
        SEED_MONDAY + H / 2,
    ),
    "seed-1d": (seed_schedule(), seed_pool(), SEED_MONDAY, SEED_MONDAY + 24 * H),
    "scenario2-reservations": (
        example("scenario2-schedule.json"),
        example("scenario2-reservations-pool.yaml"),
        SEED_MONDAY,
        SEED_MONDAY + 24 * H,
    ),
    "gpu42-time-sliced": (
        example("gpu42-schedule.json"),
        example("gpu42-pool.yaml"),
        SEED_MONDAY,
        SEED_MONDAY + 48 * H,
    ),
    "crash-fault": (
        seed_schedule(),
        with_faults({"effect": "crash", "op": "start", "point": "before_commit"}),
        SEED_MONDAY + 6 * H,
        SEED_MONDAY + 20 * H,
    ),
}


def replay(case: str, *, memory_pool: bool, memory_store: bool = False) -> dict[str, Any]:
    """``simulate``'s report of ``case``; the store held at SQL unless ``memory_store``."""
    schedule, pool, start, end = CASES[case]
    return simulate(
        load_schedule(schedule),
        load_pool(pool),
        start,
        end,
        memory_pool=memory_pool,
        memory_store=memory_store,
    ).as_dict()


def _witnessed(rep: dict[str, Any]) -> bool:
    return bool(rep["witness"]) and all(rep["witness"].values())


def _restarted_once(rep: dict[str, Any]) -> bool:
    return [(r["op"], r["point"]) for r in rep["engine_restarts"]] == [("start", "before_commit")]


def _swapped_often(rep: dict[str, Any]) -> bool:
    return len(rep["transitions"]) >= 10 and rep["downtime_seconds"]["md-llama70b"] > 0


def _shared_throughout(rep: dict[str, Any]) -> bool:
    """Members witnessed on the reservation's GPU, which is never without a fractional pod."""
    on_gpu = any(rep["witness"].values()) and all(p.get("shared") for p in rep["gpu_usage"])
    return on_gpu and len(rep["operations"]) >= 8


NOT_VACUOUS = {
    "demo-30m": _swapped_often,  # a swap every 4 minutes: the timing rules decide every step
    "seed-1d": lambda rep: len(rep["operations"]) >= 2,
    "scenario2-reservations": _witnessed,  # bound replicas on their reservations' GPUs
    "gpu42-time-sliced": _shared_throughout,  # VRAM admission, members and the holder on one GPU
    "crash-fault": _restarted_once,  # the crashed start left nothing behind
}
"""What each case must show, so that agreeing on it means something."""


@pytest.mark.parametrize("case", list(CASES))
def test_memory_pool_replays_exactly_as_the_sql_pool(case: str) -> None:
    sql, memory = replay(case, memory_pool=False), replay(case, memory_pool=True)
    for key in COMPARED:
        assert memory[key] == sql[key], f"{case}: {key} differs between MemoryPool and SimPool"
    assert memory == sql
    assert sql["gpu_usage"] and sql["transitions"] and NOT_VACUOUS[case](sql)


@pytest.mark.parametrize("case", ["demo-30m", "gpu42-time-sliced", "crash-fault"])
def test_the_default_replay_all_in_memory_reports_as_the_replay_all_in_sql(case: str) -> None:
    """What ``simulate`` runs by default (MemoryStore + MemoryPool) against the SQL store and
    SimPool together: each part is proven against its twin with the other held at SQL; this
    holds the two swapped at once."""
    schedule, pool, start, end = CASES[case]
    default = simulate(load_schedule(schedule), load_pool(pool), start, end).as_dict()
    sql = replay(case, memory_pool=False, memory_store=False)
    for key in COMPARED:
        assert default[key] == sql[key], f"{case}: {key} differs between the memory and SQL replays"
    assert default == sql and NOT_VACUOUS[case](sql)
