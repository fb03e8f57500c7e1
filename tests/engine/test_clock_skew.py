"""Time only moves forward (SPEC R-PASS-14; issue 9 §2.2), on SQLite and PostgreSQL.

Two engine replicas share one store and one pool, each on its own virtual
clock: the second reads 17:59:59 after the first opened the 18:00 plan. It
must not take "a different interval" for "a new interval" and re-plan 08:00
(start A again, stop B). The status CAS enforces the same rule in the store.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gps_dagster.clocks import VirtualClock
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.skew import Blame, blame
from gps_dagster.store import Store
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
SWAP = local("2026-10-19T18:00")


def replica(w: World, behind_s: float, *, bound_s: float = 5.0) -> tuple[Engine, VirtualClock]:
    """A second engine on the same store and pool whose clock is ``behind_s`` behind the first."""
    clock = VirtualClock(w.clock.now() - timedelta(seconds=behind_s))
    config = EngineConfig(holder="engine-skewed", max_clock_skew_s=bound_s)
    # the database's clock, in these tests, is the world's true time
    return Engine(w.store, w.pool, clock, config, database_clock=w.clock), clock


def test_2_2_a_replica_whose_clock_is_behind_does_not_undo_the_swap(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)  # 17:59:30
    first = w.engine.run_pass()  # 18:00:00: the 18:00 plan opens, A's stop is accepted
    assert len(first.plans) == 1
    plan = first.plans[0]
    plans = [tr.id for tr in w.store.list_transitions()]  # 17:59:30's (nothing to do) and 18:00's
    skewed, clock = replica(w, 1)  # reads 17:59:59
    report = skewed.run_pass()  # it may help the 18:00 plan along, never replace it
    assert report.schedules[0].behind == [A, B]
    assert report.schedules[0].opened == []
    for target in (A, B):
        st = w.status(target)
        assert (st.interval_start, st.transition_id) == (SWAP, plan.transition_id), target
    assert [tr.id for tr in w.store.list_transitions()] == plans
    # not superseded
    assert [a.state for a in w.store.list_actions(deploy_id=B)] in (
        ["pending"],
        ["capacity_wait"],
    )
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]
    # 1 s < 5 s: silent
    assert not [e for e in w.store.list_events(limit=1000) if e.kind == "clock_skew"]
    while w.clock.now() < local("2026-10-19T18:10"):  # both replicas keep passing, one second apart
        w.clock.advance(30)
        clock.set(w.clock.now() - timedelta(seconds=1))
        skewed.run_pass()
        w.engine.run_pass()
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"
    assert [tr.id for tr in w.store.list_transitions()] == plans


def test_2_2_a_replica_behind_by_more_than_the_bound_still_plans_nothing_and_says_so(
    db_url: str,
) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    w.engine.run_pass()  # 18:00:00
    skewed, _ = replica(w, 12, bound_s=5)
    report = skewed.run_pass()
    assert report.schedules[0].behind == [A, B] and report.schedules[0].opened == []
    events = [e for e in w.store.list_events(limit=1000) if e.kind == "clock_skew"]
    assert {e.deploy_id for e in events} == {A, B}
    detail = events[0].detail
    assert detail is not None and detail["behind_s"] == 12
    # this replica's clock is the one off the database's: it names itself, 12 s slow
    assert events[0].reason == "clock_behind"
    assert (detail["holder"], detail["offset_s"]) == ("engine-skewed", -12)
    assert (detail["writer"], detail["writer_offset_s"]) == (w.engine.config.holder, 0)
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]


def test_2_2_a_stale_read_of_an_older_schedule_version_plans_nothing(db_url: str) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    stale = w.store.get_schedule(w.spec.name)  # version 1, read before the edit below
    doc = seed_schedule()
    doc["windows"][0]["duration"] = "11h"  # v2: business hours end at 19:00
    w.apply(doc)
    w.tick(30)  # 17:59:30 under v2: status rows are now at version 2
    outcome = w.engine.planner.visit(stale, now=w.clock.now(), gate="enforce", trigger="tick")
    assert outcome.behind == [A, B] and outcome.opened == []
    assert {w.status(t).schedule_version for t in (A, B)} == {2}


def test_r_pass_14_the_status_cas_never_moves_an_interval_or_a_version_backwards(
    db_url: str,
) -> None:
    store = Store.open(db_url)
    w = make_world(db_url, start=EVENING)
    seen = store.ensure_status(w.spec.name, A, schedule_version=1, now=EVENING)
    evening = store.cas_status(seen, now=SWAP, interval_start=SWAP, schedule_version=1)
    assert evening is not None
    morning = local("2026-10-19T08:00")
    assert store.cas_status(evening, now=SWAP, interval_start=morning, schedule_version=1) is None
    assert store.cas_status(evening, now=SWAP, schedule_version=0) is None
    assert store.get_status(w.spec.name, A) == evening  # nothing moved
    later = store.cas_status(
        evening, now=SWAP, interval_start=SWAP + timedelta(hours=14), schedule_version=1
    )
    assert later is not None  # forward is fine
    edited = store.cas_status(later, now=SWAP, interval_start=morning, schedule_version=2)
    assert edited is not None  # a new version starts its own time line


def test_r_pass_14_a_plan_over_an_earlier_interval_is_refused_by_the_store_whatever_the_planner(
    db_url: str,
) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    w.engine.run_pass()  # 18:00: the evening plan, A's stop accepted
    plans = len(w.store.list_transitions())
    b_steps = [a.state for a in w.store.list_actions(deploy_id=B)]
    planner = w.engine.planner
    planner._behind = lambda *a, **k: False  # type: ignore[method-assign]  # a planner that forgot the rule
    skewed = VirtualClock(w.clock.now() - timedelta(seconds=1))
    outcome = planner.visit(
        w.store.get_schedule(w.spec.name), now=skewed.now(), gate="enforce", trigger="tick"
    )
    assert outcome.opened == []
    assert len(w.store.list_transitions()) == plans
    # not superseded
    assert [a.state for a in w.store.list_actions(deploy_id=B)] == b_steps == ["capacity_wait"]


def test_issue_25_5_a_fast_replica_is_named_not_the_healthy_ones_that_notice(db_url: str) -> None:
    """One replica 60 s fast serves 18:00 at 17:59:00 true time; the two healthy ones, behind
    the interval it stored, name it (``clock_ahead``, +60 s), never themselves."""
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T17:59:00"))
    fast_clock = VirtualClock(w.clock.now() + timedelta(seconds=60))
    fast = Engine(
        w.store, w.pool, fast_clock, EngineConfig(holder="engine-fast"), database_clock=w.clock
    )
    healthy = [
        w.engine,
        Engine(w.store, w.pool, w.clock, EngineConfig(holder="engine-2"), database_clock=w.clock),
    ]
    assert len(fast.run_pass().plans) == 1  # its clock says 18:00: the evening plan opens
    assert {
        (w.status(t).interval_writer, w.status(t).interval_writer_offset_s) for t in (A, B)
    } == {("engine-fast", 60.0)}
    for _ in range(3):
        w.clock.advance(10)
        fast_clock.advance(10)
        for replica in healthy:
            assert replica.run_pass().schedules[0].behind == [A, B]
    events = [e for e in w.store.list_events(limit=1000) if e.kind == "clock_skew"]
    assert len(events) == 2 * 3 * 2  # two replicas, three passes, two targets
    assert {e.reason for e in events} == {"clock_ahead"}
    for e in events:
        assert e.detail is not None
        assert (e.detail["holder"], e.detail["offset_s"]) == ("engine-fast", 60.0)
        assert e.detail["observer"] in (w.engine.config.holder, "engine-2")
        assert "clock of engine-fast" in e.detail["fix"] and "clear-skew" in e.detail["fix"]


@pytest.mark.parametrize(
    ("writer_s", "observer_s", "verdict"),
    [
        (60.0, 0.0, Blame("clock_ahead", "w", 60.0)),  # the writer runs fast
        (60.0, None, Blame("clock_ahead", "w", 60.0)),  # ... whatever this replica measured
        (0.0, -60.0, Blame("clock_behind", "me", -60.0)),  # this replica runs slow
        (10.0, -60.0, Blame("clock_behind", "me", -60.0)),  # both off: the further one
        (60.0, -10.0, Blame("clock_ahead", "w", 60.0)),
        (0.0, None, Blame("clock_behind", "me", None)),  # unmeasured here: the old reading
        (None, 0.0, Blame("interval_ahead", "w", None)),  # a row written before writers
        (3.0, -3.0, Blame("interval_ahead", "w", 3.0)),  # neither beyond the bound
    ],
)
def test_issue_25_5_whose_clock_is_off_against_the_database(
    writer_s: float | None, observer_s: float | None, verdict: Blame
) -> None:
    assert (
        blame(
            writer="w",
            writer_offset_s=writer_s,
            observer="me",
            observer_offset_s=observer_s,
            bound_s=5.0,
        )
        == verdict
    )
