"""Retention (issue 13): finished history goes, anything in flight or still named stays.

``db prune`` and the loop's automatic pass delete closed plans whose steps
all finished before the cut-off, with their steps, and old events — never a
step that may still move, an open plan, or the plan or step a target's status
still names. Counters are running totals: pruning moves none of them.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.metrics import render
from gps_dagster.store import tables as t
from tests.engine.harness import A, World, a_running_pool, local, make_world, run_for

EVENING = local("2026-10-19T17:59:30")


def counters(w: World) -> list[str]:
    """Every counter and histogram sample of the scrape (gauges left out)."""
    text = render(w.store)
    return sorted(
        line
        for line in text.splitlines()
        if re.match(r"deployschedule_(actions_total|boundary_lag_seconds)", line)
    )


def old_plan(w: World, tid: str, *, state: str, step_state: str, days: int = 40) -> None:
    """A plan (and one step) written ``days`` ago, as history leaves them."""
    at = w.clock.now() - timedelta(days=days)
    row: dict[str, Any] = {
        "id": tid,
        "schedule_name": w.spec.name,
        "schedule_version": 1,
        "boundary_at": at,
        "order": "release_first",
        "trigger": "tick",
        "state": state,
        "targets": [A],
        "created_at": at,
        "lag_seconds": 1.0,
    }
    step: dict[str, Any] = {
        "id": f"act-{tid}",
        "idempotency_key": f"key/{tid}",
        "transition_id": tid,
        "schedule_name": w.spec.name,
        "schedule_version": 1,
        "deploy_id": A,
        "interval_start": at,
        "step": "stop",
        "order": "release",
        "seq": 0,
        "state": step_state,
        "created_at": at,
        "updated_at": at,
        "finished_at": at if step_state == "converged" else None,
    }
    with w.store.engine.begin() as conn:
        conn.execute(t.transitions.insert().values(**row))
        conn.execute(t.actions.insert().values(**step))
        conn.execute(
            t.events.insert().values(
                at=at,
                schedule_name=w.spec.name,
                deploy_id=A,
                kind="phase_changed",
                phase="converged",
            )
        )


def ids(w: World, table: sa.Table) -> set[str]:
    with w.store.engine.connect() as conn:
        return set(conn.execute(sa.select(table.c.id)).scalars())


def test_prune_deletes_only_finished_unnamed_history_and_no_counter_moves(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    run_for(w, 600)  # a real swap: plans, steps, events, counters
    old_plan(w, "tr-old-done", state="done", step_state="converged")
    old_plan(w, "tr-old-flying", state="open", step_state="accepted")  # still in flight
    old_plan(w, "tr-old-closed-but-moving", state="failed", step_state="submitting")
    before = counters(w)
    current = {s.transition_id for s in w.store.list_status()}

    done = w.engine.prune(w.clock.now())

    assert done.transitions == 1 and done.actions == 1 and done.events >= 1
    left = ids(w, t.transitions)
    assert "tr-old-done" not in left
    assert {"tr-old-flying", "tr-old-closed-but-moving"} <= left  # a step may still move
    assert current <= left  # the plans the targets' statuses name
    assert {"act-tr-old-flying", "act-tr-old-closed-but-moving"} <= ids(w, t.actions)
    assert counters(w) == before  # running totals: nothing pruned moves a counter


def test_recent_history_and_the_current_plan_are_kept_even_with_a_zero_retention(
    db_url: str,
) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    run_for(w, 600)
    named = {s.transition_id for s in w.store.list_status()} | {
        s.last_action for s in w.store.list_status()
    }
    w.clock.advance(3600)
    w.engine.prune(w.clock.now(), days=0)
    kept = ids(w, t.transitions) | ids(w, t.actions)
    assert {x for x in named if x} <= kept
    assert all(s.phase == "converged" for s in w.store.list_status())


def test_the_loop_prunes_on_its_own_once_per_interval(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    old_plan(w, "tr-old-done", state="done", step_state="converged")
    loop = EngineLoop(w.engine, clock=w.clock, sleeper=w.clock.advance, interval_s=30)
    loop.tick()
    assert "tr-old-done" not in ids(w, t.transitions)
    old_plan(w, "tr-old-2", state="done", step_state="converged")
    loop.tick()  # within the hour: not again
    assert "tr-old-2" in ids(w, t.transitions)
    w.clock.advance(3601)
    loop.tick()
    assert "tr-old-2" not in ids(w, t.transitions)
