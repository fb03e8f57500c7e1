"""The due index (issue 13): which schedules need a pass, by index, across every change.

A schedule is due at once when applied (a new version must be planned) and
when the gate changes; after a pass, at its next intent boundary (computed by
the evaluator, DST included), sooner while steps are in flight, never while
disabled with nothing in flight; deleting it drops its row. Replicas share due
work by claims that expire. ``Engine.next_due`` / ``due_schedules`` are what
the boundary sensor and ``sleep_for`` read.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from gps_dagster.domain.evaluator import next_boundary
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.engine import Engine
from gps_dagster.store.due import NextDue
from tests.engine.harness import A, a_running_pool, local, make_world, op_triples, seed_schedule

EVENING = local("2026-10-19T17:59:30")


def test_apply_makes_a_schedule_due_and_a_pass_moves_it_to_its_next_boundary(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T12:00"))
    name = w.spec.name
    assert w.store.due_at(name) == w.clock.now()  # applied: due at once
    assert w.engine.due_schedules(w.clock.now()) == [name]
    w.engine.run_pass()
    assert w.store.due_at(name) == local("2026-10-19T18:00")  # business hours end
    assert w.engine.due_schedules(w.clock.now()) == []
    assert w.engine.next_due(w.clock.now()) == local("2026-10-19T18:00")

    edited = seed_schedule()  # an edit: due again at once, whatever was stored
    edited["windows"][0]["duration"] = "9h"
    w.store.apply_schedule(load_schedule(edited), now=w.clock.now())
    assert w.store.due_at(name) == w.clock.now()
    w.engine.run_pass()
    assert w.store.due_at(name) == local("2026-10-19T17:00")


def test_in_flight_steps_bring_the_schedule_back_soon_then_the_boundary(db_url: str) -> None:
    w = make_world(
        db_url, pool=a_running_pool(), start=EVENING, config=EngineConfig(follow_up_s=2.0)
    )
    w.engine.run_pass()
    w.clock.set(local("2026-10-19T18:00"))
    w.engine.run_pass()  # the 18:00 swap: the stop of A is accepted, B waits for it
    assert (A, "stop") in [(d, k) for d, k, _ in op_triples(w)]
    assert w.store.due_at(w.spec.name) == local("2026-10-19T18:00:02")  # followed up
    for _ in range(400):  # until everything converged
        w.clock.advance(2)
        w.engine.run_pass()
        if all(s.phase == "converged" for s in w.store.list_status()):
            break
    assert all(s.phase == "converged" for s in w.store.list_status())
    w.clock.advance(2)
    w.engine.run_pass()  # nothing in flight any more: due at the next boundary only
    assert w.store.due_at(w.spec.name) == local("2026-10-20T08:00")


def test_disabled_schedule_is_never_due_and_enabling_it_is_due_at_once(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T12:00"))
    off = {**seed_schedule(), "enabled": False}
    w.store.apply_schedule(load_schedule(off), now=w.clock.now())
    w.engine.run_pass()
    assert w.store.due_at(w.spec.name) is None
    assert w.engine.next_due(w.clock.now()) is None
    w.clock.advance(60)
    w.store.apply_schedule(load_schedule(seed_schedule()), now=w.clock.now())
    assert w.store.due_at(w.spec.name) == w.clock.now()


def test_delete_drops_the_due_row_and_a_gate_change_makes_every_schedule_due(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T12:00"))
    other = copy.deepcopy(seed_schedule())
    other["name"] = "other"
    other["targets"] = [{"model_deploy_id": "md-bge-embed", "default_state": "running"}]
    other["windows"] = []
    w.store.apply_schedule(load_schedule(other), now=w.clock.now())
    w.engine.run_pass()
    assert w.engine.due_schedules(w.clock.now()) == []
    w.clock.advance(5)
    w.store.set_gate("observe", now=w.clock.now())
    assert sorted(w.engine.due_schedules(w.clock.now())) == sorted(["other", w.spec.name])
    w.engine.run_pass()
    w.store.delete_schedule("other", now=w.clock.now())
    assert w.store.due_at("other") is None and w.store.due_rows(["other"]) == {}
    assert w.engine.due_schedules(w.clock.now() + timedelta(days=400)) == [w.spec.name]


def berlin_nights() -> dict[str, Any]:
    return {
        "name": "berlin",
        "timezone": "Europe/Berlin",
        "targets": [{"model_deploy_id": "md-bge-embed", "default_state": "running"}],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 22 * * *",
                "duration": "6h",
                "states": [{"model_deploy_id": "md-bge-embed", "desired_state": "stopped"}],
            }
        ],
    }


def test_the_due_instant_follows_the_evaluator_across_dst(db_url: str) -> None:
    """The night of 28→29 March 2026 in Berlin: 22:00 CET + 6 h elapsed = 05:00 CEST."""
    w = make_world(db_url, pool=a_running_pool(), start=datetime(2026, 3, 28, 20, 0, tzinfo=UTC))
    w.store.delete_schedule(w.spec.name, now=w.clock.now())
    spec = load_schedule(berlin_nights())
    w.store.apply_schedule(spec, now=w.clock.now())
    w.engine.run_pass()
    assert w.store.due_at("berlin") == datetime(2026, 3, 28, 21, 0, tzinfo=UTC)  # 22:00 CET
    w.clock.set(datetime(2026, 3, 28, 21, 0, tzinfo=UTC))
    for _ in range(200):  # the stop converges; the schedule is followed up meanwhile
        w.engine.run_pass()
        w.clock.advance(2)
    w.engine.run_pass()
    end = datetime(2026, 3, 29, 3, 0, tzinfo=UTC)  # 05:00 CEST: the clocks went forward at 02:00
    assert w.store.due_at("berlin") == end == next_boundary(spec, w.clock.now())


def test_a_claim_keeps_other_replicas_off_until_it_expires(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T12:00"))
    now = w.clock.now()
    mine = w.store.claim_due(holder="replica-1", now=now, limit=10, lease_s=60)
    assert [c.name for c in mine] == [w.spec.name]
    assert w.store.claim_due(holder="replica-2", now=now, limit=10, lease_s=60) == []
    assert w.engine.due_schedules(now) == []  # served by replica-1: not offered again
    assert w.engine.next_due(now) == now + timedelta(seconds=60)  # wake when the claim expires
    other = Engine(w.store, w.pool, w.clock, EngineConfig(holder="replica-2"))
    assert other.run_pass().schedules == []  # replica-2 skips it: no double work
    later = now + timedelta(seconds=61)  # replica-1 crashed: its claim expired, taken over
    taken = w.store.claim_due(holder="replica-2", now=later, limit=10, lease_s=60)
    assert [c.name for c in taken] == [w.spec.name]
    w.store.finish_due([NextDue(w.spec.name, taken[0].revision, None)], holder="replica-1")
    assert w.store.claim_due(holder="replica-3", now=later, limit=10, lease_s=60) == []


def test_a_mark_during_a_visit_is_not_lost(db_url: str) -> None:
    """An apply between the claim and the end of the visit keeps the schedule due."""
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T12:00"))
    now = w.clock.now()
    (claim,) = w.store.claim_due(holder="r", now=now, limit=10, lease_s=60)
    edited = seed_schedule()  # an edit (an unchanged document is a no-op: R-MODEL-8)
    edited["windows"][0]["duration"] = "9h"
    w.store.apply_schedule(load_schedule(edited), now=now)  # revision moves on
    w.store.finish_due([NextDue(claim.name, claim.revision, now + timedelta(hours=6))], holder="r")
    assert w.store.due_at(claim.name) == now


def test_reconcile_due_opens_the_due_plans_for_dagster_and_runs_no_step(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    w.engine.run_pass()
    assert w.engine.reconcile_due().plans == []  # nothing due at 17:59:30
    w.clock.set(local("2026-10-19T18:00"))
    report = w.engine.reconcile_due()
    (plan,) = report.plans
    assert [s.deploy_id for s in plan.release_steps] == [A] and op_triples(w) == []
    assert w.store.due_at(w.spec.name) == local("2026-10-19T18:00:02")  # steps pending: soon
