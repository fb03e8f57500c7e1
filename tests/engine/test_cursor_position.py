"""A due boundary is served at once, whatever page the cursor is on (issue 13).

Before the due index, ``engine run`` visited only the page its cursor was on:
five schedules at page size 1 were served 0, 30, 90, 120 and 150 s late. Here
the schedule whose window starts is the LAST by name, the cursor is on the
first page, and the pass at the boundary submits its release at the boundary.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from tests.engine.harness import local

NOON = local("2026-10-19T12:00")
BOUNDARY = local("2026-10-19T12:10")


def pool() -> dict[str, Any]:
    deploys = [{"id": f"d{i}", "gpus_per_replica": 1, "state": "running"} for i in range(5)]
    return {"name": "five", "nodes": [{"name": "n1", "gpus": 8}], "deploys": deploys}


def schedule(i: int, *, boundary: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": f"s{i}",
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [{"model_deploy_id": f"d{i}", "default_state": "running"}],
        "windows": [],
    }
    if boundary:
        doc["windows"] = [
            {
                "name": "maint",
                "kind": "one_shot",
                "priority": 10,
                "active_from": BOUNDARY.isoformat(),
                "active_until": (BOUNDARY + timedelta(hours=1)).isoformat(),
                "states": [
                    {"model_deploy_id": f"d{i}", "desired_state": "stopped", "allow_downtime": True}
                ],
            }
        ]
    return doc


def test_a_due_schedule_on_the_last_page_is_served_at_its_boundary(db_url: str) -> None:
    clock = VirtualClock(NOON)
    store = Store.open(db_url)
    sim = SimPool.create(store.engine, load_pool(copy.deepcopy(pool())), clock)
    for i in range(5):
        store.apply_schedule(load_schedule(schedule(i, boundary=i == 4)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    engine = Engine(store, sim, clock, EngineConfig(page_size=1))
    engine.run_pass()  # every schedule just applied is due: all planned, wherever the cursor is
    assert {s.schedule for s in store.list_status()} == {f"s{i}" for i in range(5)}
    clock.set(BOUNDARY - timedelta(seconds=30))
    engine.run_pass()
    assert store.get_cursor() in (None, "s0", "s1")  # the sweep is on one of the first pages

    clock.set(BOUNDARY)
    report = engine.run_pass()
    (stop,) = store.list_actions(schedule="s4")
    assert stop.step == "stop" and stop.submitted_at == BOUNDARY  # served at the boundary
    assert "s4" in [o.schedule for o in report.schedules]
    assert [o.deploy_id for o in sim.operation_log()] == ["d4"]


def test_a_sweep_asked_to_stop_leaves_the_cursor_on_the_last_schedule_visited(
    db_url: str,
) -> None:
    clock = VirtualClock(NOON)
    store = Store.open(db_url)
    sim = SimPool.create(store.engine, load_pool(copy.deepcopy(pool())), clock)
    for i in range(5):
        store.apply_schedule(load_schedule(schedule(i, boundary=False)), now=clock.now())
    store.set_gate("enforce", now=clock.now())
    engine = Engine(store, sim, clock, EngineConfig(page_size=3))
    engine.run_pass()  # all due once; then only the steady sweep visits them
    store.set_cursor(None, now=clock.now())
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # two schedules of the page, then stop

    report = engine.run_pass(stop=stop)
    assert report.stopped and [o.schedule for o in report.schedules] == ["s0", "s1"]
    assert store.get_cursor() == "s1"
    assert [o.schedule for o in engine.run_pass().schedules] == ["s2", "s3", "s4"]
