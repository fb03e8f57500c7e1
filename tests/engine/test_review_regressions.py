"""Regressions found by a second review of the engine (each failed before its fix)."""

from __future__ import annotations

from gps_dagster.domain.phases import is_terminal
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import DeployState
from gps_dagster.store import Store
from tests.engine.harness import (
    A,
    B,
    a_running_pool,
    local,
    make_world,
    op_triples,
    run_for,
)

EVENING = local("2026-10-19T17:59:30")  # 18:00: A stops (release), B starts (acquire)
MORNING = local("2026-10-19T07:59:30")  # 08:00: B stops (release), A starts (acquire)


def test_ineligible_acquire_target_means_nothing_is_released(sqlite_url: str) -> None:
    """R-PASS-6: preflight of every acquiring step checks the deploy state; a failure releases
    nothing."""
    w = make_world(sqlite_url, start=MORNING)
    # A (to be started at 08:00) is FAILED
    w.pool.inject_fault(FaultSpec(effect="failed", deploy=A))
    w.run_until(local("2026-10-19T08:05"))
    assert w.status(A).phase == "ineligible"
    assert not [o for o in op_triples(w) if o[0] == B], "B was stopped although A cannot be started"
    assert w.deploy(B).state is DeployState.READY


def test_terminal_phase_after_a_refused_submit_is_not_retried_without_apply_now(
    sqlite_url: str,
) -> None:
    """§5: a terminal phase is left only on a new interval or apply-now."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy=A, error="permanent"))
    w.run_until(local("2026-10-19T18:00:30"))
    first = w.status(A)
    assert is_terminal(first.phase), first.phase
    run_for(w, 300)
    boundary = local("2026-10-19T18:00")
    attempts = [t for t in w.store.list_transitions(w.spec.name) if t.boundary_at == boundary]
    assert len(attempts) == 1, [(t.state, t.targets, t.created_at.isoformat()) for t in attempts]
    assert not [o for o in op_triples(w) if o[0] == A and o[1] == "stop"], (
        "A was stopped by an automatic new attempt"
    )
    assert w.status(A).target_generation == first.target_generation


def test_preflight_alias_guard_read_error_is_alias_blocked(sqlite_url: str) -> None:
    """R-PASS-8: an alias guard that fails to read -> alias_blocked (fail closed), as at submit
    time."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)  # 17:59:30
    w.pool.inject_fault(
        FaultSpec(effect="fail_next", op="alias_guard", deploy=A, error="permanent")
    )
    w.tick(30)  # 18:00: the plan's preflight reads the alias guard
    st = w.status(A)
    assert st.phase == "alias_blocked", (st.phase, st.reason)


def test_accepted_status_write_never_regresses_a_converged_target(sqlite_url: str) -> None:
    """R-PASS-11: status by CAS, no regression; a converged step must not leave its target
    'releasing'."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    report = w.engine.reconcile()
    (plan,) = report.plans
    stop_id = plan.release_steps[0].step_id
    other_store = Store.open(sqlite_url)
    other = Engine(other_store, w.pool, w.clock, EngineConfig(holder="engine-2"))
    real_write = w.store.write_each  # the accepted write (the executor's bulk ending)
    fired = []

    def write_each(writes, *, now):  # type: ignore[no-untyped-def]
        ok = real_write(writes, now=now)
        if (
            stop_id in ok
            and writes[0].changes.get("state") == "accepted"
            and writes[0].action_id == stop_id
            and not fired
        ):
            fired.append(1)
            # engine-2 (another replica / the reconcile sensor) observes the accepted stop converge
            w.clock.advance(300)
            w.pool.settle()
            out = other.observer.observe_action(other_store.get_action(stop_id))
            assert out.state == "converged", out
            assert other_store.get_status(w.spec.name, A).phase == "converged"
        return ok

    w.store.write_each = write_each  # type: ignore[method-assign]
    w.engine.execute_step(stop_id)
    w.store.write_each = real_write  # type: ignore[method-assign]
    assert fired
    run_for(w, 1800)
    assert w.store.get_action(stop_id).state == "converged"
    assert w.status(A).phase == "converged", w.status(A).phase


def test_gate_off_step_in_submitting_is_not_submitted(sqlite_url: str) -> None:
    """R-PASS-1: gate off -> submit nothing (a Dagster op re-running a 'submitting' step
    included)."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    report = w.engine.reconcile()
    stop_id = report.plans[0].release_steps[0].step_id
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy=A, error="transient"))
    assert w.engine.execute_step(stop_id).state == "submitting"
    assert op_triples(w) == []  # the core never got it
    w.store.set_gate("off", now=w.clock.now())
    w.engine.execute_step(stop_id)  # e.g. a resumed / re-executed transition run
    assert op_triples(w) == [], "submitted to the core with the gate off"


def test_accepted_step_times_out_even_while_the_core_is_unreadable(sqlite_url: str) -> None:
    """Every wait has a clock: an accepted stop past stop_timeout ends terminal."""
    w = make_world(
        sqlite_url, pool=a_running_pool(), start=EVENING, config=EngineConfig(stop_timeout_s=600)
    )
    w.run_until(local("2026-10-19T18:00:01"))  # 18:00: the stop of A is accepted
    (stop,) = w.store.list_actions(deploy_id=A, states=("accepted",))
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="get_deploy", deploy=A, times=500))
    run_for(w, 1800)
    st = w.status(A)
    assert w.store.get_action(stop.id).state != "accepted", (st.phase, w.clock.now().isoformat())
    assert is_terminal(st.phase) or st.phase == "converged", st.phase


def test_resubmit_of_a_submitting_step_after_a_schedule_edit_is_fenced_out(sqlite_url: str) -> None:
    """R-MODEL-8 / R-PASS-7: every submit re-checks the snapshot version; an edit fences the old
    step out."""
    from tests.engine.harness import seed_schedule

    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)
    report = w.engine.reconcile()
    stop_id = report.plans[0].release_steps[0].step_id
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy=A, error="transient"))
    assert w.engine.execute_step(stop_id).state == "submitting"
    assert op_triples(w) == []  # the core never got the stop
    doc = seed_schedule()
    doc["windows"][0]["duration"] = (
        "11h"  # edit: business hours now end at 19:00, A must keep serving
    )
    w.apply(doc)
    w.engine.execute_step(stop_id)
    assert not [o for o in op_triples(w) if o[0] == A], "stale stop submitted after the edit"


def test_capacity_wait_ends_at_its_deadline_even_while_the_preview_fails(sqlite_url: str) -> None:
    """Every wait has a clock: capacity_wait -> capacity_unavailable past start + 15 min."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.run_until(local("2026-10-19T18:00:01"))
    assert w.status(B).phase == "capacity_wait"
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="preview_capacity", deploy=B, times=500))
    run_for(w, 1800)
    assert w.status(B).phase == "capacity_unavailable", w.status(B).phase


def test_endpoint_alias_guard_member_read_error_fails_the_step_not_the_pass(
    sqlite_url: str,
) -> None:
    """R-PASS-8: alias guard read error -> alias_blocked (terminal), never an exception out of the
    step."""
    from tests.engine.test_warnings import endpoint_pool, endpoint_schedule

    w = make_world(
        sqlite_url,
        schedule=endpoint_schedule(),
        pool=endpoint_pool(a_running=True, b_running=True),
        start=EVENING,
    )
    w.tick(30)
    report = w.engine.reconcile()
    (plan,) = report.plans
    stop_id = plan.release_steps[0].step_id
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="list_members", error="transient"))
    outcome = w.engine.execute_step(stop_id)
    assert outcome.state in ("failed", "pending", "submitting"), outcome


def test_release_op_run_after_the_gate_was_off_re_checks_preflight_before_releasing(
    sqlite_url: str,
) -> None:
    """R-PASS-6: preflight before the first releasing step; A is not stopped for nothing.

    Dagster path: the plan opens in the reconcile sensor (preflight ok); its release op runs later
    (daemon queue, or a resume run after the gate was off for hours) on the strength of the old
    preflight.
    """
    from tests.engine.harness import cmp_pool, cmp_schedule

    w = make_world(sqlite_url, schedule=cmp_schedule(), pool=cmp_pool(), start=EVENING)
    w.tick(30)
    report = w.engine.reconcile()  # 18:00: plan opened, preflight passed
    stop_id = report.plans[0].release_steps[0].step_id
    # B's project stops paying before the release op runs
    w.pool.set_project("chat", billing="unpaid")
    w.engine.execute_step(stop_id)  # the release op
    assert w.deploy(A).state is DeployState.READY, (
        "A stopped although B's billing now refuses the start"
    )
