"""Terminal outcomes are written atomically (SPEC R-PASS-16; issue 9 §2.4, §2.6).

The process is killed at the SQL statement that writes the target's status
(``tests/engine/cores.py::crash_on``, a database-level hook, so it hits the
old split writes and the new single transaction alike). A new engine then
carries on: nothing may be left ``releasing`` forever, and no dependent may
inherit a non-terminal phase.
"""

from __future__ import annotations

from datetime import datetime

from gps_dagster.domain.phases import is_terminal
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import DeployState
from tests.engine.cores import ProcessCrash, crash_on, status_update_to
from tests.engine.harness import (
    A,
    B,
    World,
    a_running_pool,
    local,
    make_world,
    op_triples,
    seed_schedule,
)

EVENING = local("2026-10-19T17:59:30")


def run_with_restarts(w: World, until: datetime, config: EngineConfig) -> int:
    crashes = 0
    while w.clock.now() < until:
        try:
            w.engine.run_pass()
        except ProcessCrash:
            crashes += 1
            w.engine = Engine(w.store, w.pool, w.clock, config)  # a new process on the same store
        w.clock.advance(30)
    return crashes


def assert_nothing_stranded(w: World) -> None:
    assert not w.store.list_actions(states=("pending", "capacity_wait", "submitting", "accepted"))
    assert not w.store.list_transitions(states=("open",))
    for st in w.store.list_status():
        assert st.phase == "converged" or is_terminal(st.phase), (st.deploy_id, st.phase)


def test_2_4_a_crash_between_the_failed_step_and_its_status_leaves_nothing_releasing(
    sqlite_url: str,
) -> None:
    pool = a_running_pool()
    pool["sim"]["timings"]["stop_grace_s"] = (
        900  # A's pods terminate for 15 min: stop_timeout at 18:02
    )
    config = EngineConfig(stop_timeout_s=120)
    w = make_world(sqlite_url, pool=pool, start=EVENING, config=config)
    with crash_on(w.store.engine, status_update_to("stop_timeout")) as fired:
        assert run_with_restarts(w, local("2026-10-19T18:10"), config) == 1
    assert fired
    a, b = w.status(A), w.status(B)
    assert (a.phase, a.reason) == ("stop_timeout", "stop_timeout")
    # the culprit's terminal phase, not "releasing"
    assert (b.phase, b.reason) == (
        "stop_timeout",
        "stop_timeout",
    )
    assert f"{B} not touched" in (b.fix or "")
    assert [x.state for x in w.store.list_actions(deploy_id=B)] == ["cancelled"]
    assert_nothing_stranded(w)
    assert w.deploy(B).state is DeployState.STOPPED and [(d, k) for d, k, _ in op_triples(w)] == [
        (A, "stop")
    ]


def test_2_4_a_crash_between_convergence_and_its_status_leaves_nothing_releasing(
    sqlite_url: str,
) -> None:
    config = EngineConfig()
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING, config=config)
    w.tick(30)
    w.tick(30)  # 18:00: A's stop accepted
    with crash_on(
        w.store.engine, status_update_to("converged")
    ) as fired:  # A's stop converges next
        assert run_with_restarts(w, local("2026-10-19T18:10"), config) == 1
    assert fired
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"
    assert_nothing_stranded(w)
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]


def test_2_6_a_superseded_plan_is_closed_in_the_transaction_that_opens_the_new_one(
    sqlite_url: str,
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    (old,) = w.engine.reconcile().plans  # 18:00: A stop, B start — opened, not executed (Dagster)
    doc = seed_schedule()
    doc["windows"][0]["duration"] = "11h"  # v2: A keeps serving until 19:00
    w.apply(doc)
    report = w.engine.reconcile()  # v2's plan for 18:00 (nothing to do) replaces v1's
    assert report.schedules[0].version == 2
    steps = w.store.list_actions(transition_id=old.transition_id)
    # supersede ran
    assert [(x.deploy_id, x.state) for x in steps] == [
        (A, "superseded"),
        (B, "superseded"),
    ]
    assert w.store.get_transition(old.transition_id).state == "superseded"  # type: ignore[union-attr]
    assert not w.store.list_transitions(states=("open",))
    assert op_triples(w) == []
