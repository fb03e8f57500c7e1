"""``simulate`` on inputs that used to end in a traceback (issue 9 §3).

* a CMP endpoint as target: the sampler read the endpoint id as a deploy (NotFound);
* a pool ``crash`` fault: the simulated process death escaped the replay;
* faults meant for the engine were consumed (or raised) by the sampler and the report.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.simulation import simulate
from tests.engine.harness import SEED_MONDAY, A, B, seed_pool, seed_schedule
from tests.engine.test_warnings import endpoint_pool, endpoint_schedule

MORNING = SEED_MONDAY + timedelta(hours=6)
EVENING = SEED_MONDAY + timedelta(hours=20)


def with_faults(*faults: dict[str, Any]) -> dict[str, Any]:
    pool = seed_pool()
    pool.setdefault("sim", {})["faults"] = list(faults)
    return pool


def test_simulate_replays_a_cmp_endpoint_target() -> None:
    rep = simulate(load_schedule(endpoint_schedule()), load_pool(endpoint_pool()), MORNING, EVENING)
    assert rep.final_status["ep-chat"]["phase"] == "converged"
    assert [(o["deploy"], o["kind"]) for o in rep.operations] == [
        ("ep-chat-a", "start"),
        ("ep-chat-b", "start"),
        ("ep-chat-a", "stop"),
        ("ep-chat-b", "stop"),
    ]
    assert rep.max_gpus_desired == 4  # both members, 2 GPUs each
    assert rep.max_gpus_in_use == 4


def test_a_pool_crash_fault_replays_as_an_engine_restart() -> None:
    pool = with_faults({"effect": "crash", "op": "start", "point": "before_commit"})
    rep = simulate(load_schedule(seed_schedule()), load_pool(pool), MORNING, EVENING)
    assert [(r["op"], r["point"]) for r in rep.restarts] == [("start", "before_commit")]
    eight = SEED_MONDAY + timedelta(hours=8)
    assert (
        eight < rep.restarts[0]["at"] < eight + timedelta(minutes=5)
    )  # B stopped, A's start crashed
    assert rep.as_dict()["engine_restarts"][0]["op"] == "start"
    starts = [o for o in rep.operations if o["deploy"] == A and o["kind"] == "start"]
    assert len(starts) == 1  # the crashed start rolled back; the new engine started A once
    assert starts[0]["at"] > rep.restarts[0]["at"]
    assert {s["phase"] for s in rep.final_status.values()} == {"converged"}


def test_faults_meant_for_the_engine_are_not_taken_by_the_sampler() -> None:
    """The engine never reads B alone before noon; the sampler did, and died on B's fault."""
    pool = with_faults({"effect": "fail_next", "op": "get_deploy", "deploy": B})
    rep = simulate(
        load_schedule(seed_schedule()), load_pool(pool), MORNING, SEED_MONDAY + timedelta(hours=12)
    )
    assert {t: s["phase"] for t, s in rep.final_status.items()} == {A: "converged", B: "converged"}
    assert (
        rep.downtime_seconds[A] > 0
    )  # samples still see A start (it is ready after its start delay)
