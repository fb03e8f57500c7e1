"""One test per operator-facing warning of SPEC §6, reproduced through the simulated pool.

Each test drives the real engine over a real database on a virtual clock,
reaches the warning through the pool's fault injection (or a schedule/pool
variant), and asserts the phase, the reason, the fix text, and that nothing
else moved: the pool's operation log holds exactly the mutations the warning
allows.
"""

from __future__ import annotations

from typing import Any

import pytest

from gps_dagster.backends.sim import snapshot
from gps_dagster.domain.phases import INELIGIBLE_FIXES
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.dry_run import dry_run
from gps_dagster.ports import DeployState
from gps_dagster.store import Store
from gps_dagster.store.errors import TargetOwned
from tests.engine.harness import (
    A,
    B,
    World,
    a_running_pool,
    cmp_pool,
    cmp_schedule,
    jump,
    local,
    make_world,
    op_triples,
    run_for,
    seed_pool,
    seed_schedule,
)

EVENING = local("2026-10-19T17:59:30")  # A serving, 30 s before the 18:00 swap (A stops, B starts)
MORNING = local("2026-10-19T07:59:30")  # A stopped, B running, 30 s before the 08:00 swap


def evening(
    url: str,
    *,
    schedule: dict[str, Any] | None = None,
    pool: dict[str, Any] | None = None,
    config: EngineConfig | None = None,
    gate: str = "enforce",
) -> World:
    return make_world(
        url,
        schedule=schedule,
        pool=pool or a_running_pool(),
        start=EVENING,
        config=config,
        gate=gate,
    )


def held_by(world: World, holder: str) -> int:
    return sum(1 for g in snapshot(world.pool).gpus if g.holder == holder and g.state == "held")


# -- alias_blocked ---------------------------------------------------------------------------


def test_alias_blocked_without_consent_keeps_a_serving_and_b_stopped(sqlite_url: str) -> None:
    doc = seed_schedule()
    doc["targets"][0]["default_allow_downtime"] = False  # 18:00 stops A without consent
    w = evening(sqlite_url, schedule=doc)
    warned = dry_run(w.spec, w.pool, local("2026-10-19T18:00"))
    assert [x["kind"] for x in warned.warnings if x["target"] == A] == ["alias_blocked"]
    run_for(w, 300)
    st = w.status(A)
    assert (st.phase, st.reason) == ("alias_blocked", "alias_without_consent")
    assert "allow_downtime" in (st.fix or "") and "chat-prod" in (st.fix or "")
    assert w.status(B).phase == "alias_blocked" and f"{A} failed preflight" in (
        w.status(B).fix or ""
    )
    assert w.deploy(A).state is DeployState.READY
    assert w.deploy(B).state is DeployState.STOPPED
    assert op_triples(w) == []


@pytest.mark.parametrize(
    ("effect", "reason"),
    [
        ("alias_guard_unwired", "alias_guard_unwired"),
        ("alias_guard_error", "alias_guard_read_error"),
    ],
)
def test_alias_guard_unwired_or_unreadable_fails_closed(
    sqlite_url: str, effect: Any, reason: str
) -> None:
    w = evening(sqlite_url)  # the seed schedule consents: only the guard itself is at fault
    w.pool.inject_fault(FaultSpec(effect=effect, deploy=A))
    run_for(w, 300)
    st = w.status(A)
    assert (st.phase, st.reason) == ("alias_blocked", reason)
    assert "wiring" in (st.fix or "")
    assert w.deploy(A).state is DeployState.READY
    assert w.deploy(B).state is DeployState.STOPPED
    assert op_triples(w) == []


def test_alias_guard_failing_between_preflight_and_submit_still_blocks_the_stop(
    sqlite_url: str,
) -> None:
    w = evening(sqlite_url)
    w.tick(30)  # 17:59:30: nothing to do
    report = w.engine.reconcile()  # 18:00: the plan opens (preflight passed) but no step runs yet
    assert len(report.plans) == 1
    w.pool.inject_fault(FaultSpec(effect="alias_guard_unwired", deploy=A))
    stop = report.plans[0].release_steps[0]
    outcome = w.engine.execute_step(stop.step_id)
    assert (outcome.state, outcome.phase, outcome.reason) == (
        "failed",
        "alias_blocked",
        "alias_guard_unwired",
    )
    assert w.status(A).phase == "alias_blocked"
    assert w.deploy(A).state is DeployState.READY
    assert op_triples(w) == []


# -- quota_refused / billing_refused -----------------------------------------------------------


def test_quota_refused_stops_nothing_a_keeps_serving(sqlite_url: str) -> None:
    w = evening(sqlite_url, schedule=cmp_schedule(), pool=cmp_pool(quota=5))  # B needs 6 GPUs
    run_for(w, 300)
    st = w.status(B)
    assert (st.phase, st.reason) == ("quota_refused", "quota_refused")
    assert "raise the project's GPU quota" in (st.fix or "")
    assert (st.detail or {}).get("project") == "chat"
    assert w.status(A).phase == "quota_refused" and f"{B} failed preflight" in (
        w.status(A).fix or ""
    )
    assert w.deploy(A).state is DeployState.READY
    assert not [o for o in op_triples(w) if o[1] == "stop"]
    assert op_triples(w) == []


def test_quota_preflight_counts_the_gpus_the_plan_releases_first(sqlite_url: str) -> None:
    """Quota 10: A (8) then B (6) never exceed it, so the release-first swap must not be refused."""
    w = evening(sqlite_url, schedule=cmp_schedule(), pool=cmp_pool(quota=10))
    run_for(w, 300)
    assert w.status(A).phase == "converged"
    assert w.status(B).phase == "converged"
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]


def test_billing_refused_stops_nothing_a_keeps_serving(sqlite_url: str) -> None:
    w = evening(sqlite_url, schedule=cmp_schedule(), pool=cmp_pool(billing="unpaid"))
    run_for(w, 300)
    st = w.status(B)
    assert (st.phase, st.reason) == ("billing_refused", "billing_refused")
    assert "settle the project's billing" in (st.fix or "")
    assert w.deploy(A).state is DeployState.READY
    assert op_triples(w) == []


# -- capacity_wait -> capacity_unavailable --------------------------------------------------------


def test_capacity_taken_by_an_intruder_ends_capacity_unavailable_after_the_wait(
    sqlite_url: str,
) -> None:
    w = evening(sqlite_url, config=EngineConfig(capacity_wait_s=300))
    w.pool.add_foreign("intruder", 8, kind="intruder")
    w.run_until(local("2026-10-19T18:05"))  # last pass at 18:04:30
    assert w.status(B).phase == "capacity_wait"
    w.tick(30)  # 18:05:00 = nominal start + capacity_wait_s
    st = w.status(B)
    assert (st.phase, st.reason) == ("capacity_unavailable", "capacity_unavailable")
    assert st.phase_since == local("2026-10-19T18:05")
    assert "add a reservation" in (st.fix or "") and "not restarted" in (st.fix or "")
    run_for(w, 600)
    assert w.deploy(B).state is DeployState.STOPPED
    assert w.deploy(A).state is DeployState.STOPPED  # the released target is not restarted
    assert held_by(w, "intruder") == 8
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]
    assert w.status(B).phase == "capacity_unavailable"


# -- drift_detected --------------------------------------------------------------------------------


def test_manual_stop_is_drift_respected_until_the_intent_changes(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=local("2026-10-19T10:00"))
    w.tick(30)
    assert w.status(A).phase == "converged"
    d = w.deploy(A)
    w.pool.stop(A, etag=d.etag, allow_aliased_downtime=True, idempotency_key="operator/manual-stop")
    w.tick(30)
    st = w.status(A)
    assert (st.phase, st.reason) == ("drift_detected", "drift_detected")
    assert "none needed" in (st.fix or "")
    run_for(w, 600)
    jump(w, local("2026-10-19T17:59:30"))
    w.tick(30)
    assert w.status(A).phase == "drift_detected"
    assert [k for dep, k, _ in op_triples(w) if dep == A] == ["stop"]  # only the operator's
    w.run_until(local("2026-10-19T18:06"))  # 18:00: a new interval (A stopped, B running) acts
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"
    jump(w, local("2026-10-20T07:59:30"))
    w.run_until(local("2026-10-20T08:06"))  # Tue 08:00: A's next running interval starts it again
    starts = [key for dep, k, key in op_triples(w) if dep == A and k == "start"]
    assert len(starts) == 1 and "20261020T010000Z" in starts[0]
    assert w.deploy(A).state is DeployState.READY


# -- start_unschedulable / readiness_timeout -------------------------------------------------------


def test_start_unschedulable_is_terminal_and_keeps_the_allocation(sqlite_url: str) -> None:
    w = evening(sqlite_url, config=EngineConfig(unschedulable_grace_s=120))
    w.pool.inject_fault(FaultSpec(effect="unschedulable", deploy=B))
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("start_unschedulable", "start_unschedulable")
    assert "allocation" in (st.fix or "") and "kept" in (st.fix or "")
    assert (st.detail or {}).get("allocation_kept") is True
    assert w.deploy(B).state is not DeployState.STOPPED
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]


def test_readiness_timeout_is_terminal_and_keeps_the_allocation(sqlite_url: str) -> None:
    w = evening(sqlite_url, config=EngineConfig(readiness_timeout_s=300))
    w.pool.inject_fault(FaultSpec(effect="never_ready", deploy=B))
    w.run_until(local("2026-10-19T18:06"))
    assert w.status(B).phase == "awaiting_ready"  # accepted at 18:01:30, deadline 18:06:30
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("readiness_timeout", "readiness_timeout")
    assert "allocation is kept" in (st.fix or "")
    assert (st.detail or {}).get("allocation_kept") is True
    assert held_by(w, B) == 6
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop"), (B, "start")]


# -- stop_timeout ----------------------------------------------------------------------------------


def test_stop_timeout_when_pods_terminate_too_long_and_b_is_not_started(sqlite_url: str) -> None:
    pool = a_running_pool()
    pool["sim"]["timings"]["stop_grace_s"] = 900
    w = evening(sqlite_url, pool=pool, config=EngineConfig(stop_timeout_s=120))
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("stop_timeout", "stop_timeout")
    assert st.phase_since == local("2026-10-19T18:02")
    assert "terminating pods" in (st.fix or "")
    assert w.status(B).reason == "stop_timeout" and f"{B} not touched" in (w.status(B).fix or "")
    assert w.deploy(B).state is DeployState.STOPPED
    assert [(d, k) for d, k, _ in op_triples(w)] == [(A, "stop")]


# -- partial_execution -----------------------------------------------------------------------------


def endpoint_pool(*, a_running: bool = False, b_running: bool = False) -> dict[str, Any]:
    member = {"kind": "dgd", "project": "chat", "gpus_per_replica": 2, "endpoint": "ep-chat"}
    return {
        "name": "cmp-endpoint-pool",
        "nodes": [{"name": "n1", "gpus": 8}],
        "deploys": [
            {**member, "id": "ep-chat-a", "state": "running" if a_running else "stopped"},
            {**member, "id": "ep-chat-b", "state": "running" if b_running else "stopped"},
        ],
        "projects": {"chat": {}},
        "sim": {"timings": {"stop_grace_s": 30, "publish_lag_s": 60, "start_delay_s": 120}},
    }


def endpoint_schedule() -> dict[str, Any]:
    return {
        "name": "chat-endpoint",
        "timezone": "Asia/Ho_Chi_Minh",
        "scope": "cmp:chat",
        "targets": [{"model_deploy_id": "ep-chat", "default_state": "stopped"}],
        "windows": [
            {
                "name": "business-hours",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 8 * * 1-5",
                "duration": "10h",
                "states": [{"model_deploy_id": "ep-chat", "desired_state": "running"}],
            }
        ],
    }


def test_endpoint_start_failing_on_the_second_member_compensates_the_first(sqlite_url: str) -> None:
    w = make_world(sqlite_url, schedule=endpoint_schedule(), pool=endpoint_pool(), start=MORNING)
    w.pool.inject_fault(FaultSpec(effect="fail_start", deploy="ep-chat-b"))
    w.run_until(local("2026-10-19T08:03"))
    st = w.status("ep-chat")
    assert (st.phase, st.reason) == ("partial_execution", "partial_execution")
    assert "ep-chat-b" in (st.fix or "") and "per-member receipt" in (st.fix or "")
    receipt = (st.detail or {})["receipt"]
    assert receipt["ep-chat-a"]["result"] == "compensated"
    assert receipt["ep-chat-b"]["result"] == "failed"
    assert [(d, k) for d, k, _ in op_triples(w)] == [("ep-chat-a", "start"), ("ep-chat-a", "stop")]
    assert w.deploy("ep-chat-a").state is DeployState.STOPPED
    assert w.deploy("ep-chat-b").state is DeployState.STOPPED


# -- ineligible{reason} ----------------------------------------------------------------------------


def _batch_b(pool: dict[str, Any], doc: dict[str, Any]) -> None:
    pool["deploys"][1]["kind"] = "batch"


def _kserve_b_with_replicas(pool: dict[str, Any], doc: dict[str, Any]) -> None:
    pool["deploys"][1]["kind"] = "kserve"
    doc["targets"][1]["default_replicas"] = 1


def _cmp_b_admin_schedule(pool: dict[str, Any], doc: dict[str, Any]) -> None:
    pool["deploys"][1]["project"] = "batch"
    pool["projects"] = {"batch": {}}


def _b_moved_project(pool: dict[str, Any], doc: dict[str, Any]) -> None:
    for dep in pool["deploys"][:2]:
        dep["project"] = "chat"
    pool["deploys"][1]["project"] = "other"
    pool["projects"] = {"chat": {}, "other": {}}
    doc["scope"] = "cmp:chat"


@pytest.mark.parametrize(
    ("reason", "change"),
    [
        ("unsupported_kind", _batch_b),
        ("unsupported_scale_for_mode", _kserve_b_with_replicas),
        ("cmp_managed", _cmp_b_admin_schedule),
        ("scope_changed", _b_moved_project),
    ],
)
def test_ineligible_target_is_terminal_with_its_fix_and_untouched(
    sqlite_url: str, reason: str, change: Any
) -> None:
    pool, doc = seed_pool(), seed_schedule()
    change(pool, doc)
    w = make_world(sqlite_url, schedule=doc, pool=pool, start=MORNING)
    w.run_until(local("2026-10-19T08:05"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("ineligible", reason)
    assert st.fix == INELIGIBLE_FIXES[reason]
    assert not [o for o in op_triples(w) if o[0] == B]


def test_target_failed_is_ineligible_and_rechecked_every_pass(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=local("2026-10-19T03:00"))
    w.tick(30)
    w.pool.inject_fault(FaultSpec(effect="failed", deploy=B))
    w.tick(30)
    st = w.status(B)
    assert (st.phase, st.reason, st.fix) == (
        "ineligible",
        "target_failed",
        INELIGIBLE_FIXES["target_failed"],
    )
    assert w.status(A).phase == "converged"
    w.pool.clear_faults()
    w.tick(30)
    assert w.status(B).phase == "converged"  # repaired: eligible again on the next pass
    assert op_triples(w) == []


def test_endpoint_found_partly_running_is_ineligible_before_acting(sqlite_url: str) -> None:
    w = make_world(
        sqlite_url, schedule=endpoint_schedule(), pool=endpoint_pool(a_running=True), start=MORNING
    )
    w.run_until(local("2026-10-19T08:05"))
    st = w.status("ep-chat")
    assert (st.phase, st.reason) == ("ineligible", "endpoint_partially_running")
    assert st.fix == INELIGIBLE_FIXES["endpoint_partially_running"]
    assert op_triples(w) == []


# -- target_owned ----------------------------------------------------------------------------------


def test_second_schedule_claiming_b_is_target_owned_and_persists_nothing(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=MORNING)
    before = [(r.name, r.version) for r in w.store.list_schedules()]
    other = load_schedule(
        {
            "name": "batch-nightly",
            "timezone": "UTC",
            "targets": [
                {"model_deploy_id": "md-other", "default_state": "running"},
                {"model_deploy_id": B, "default_state": "running"},
            ],
        }
    )
    with pytest.raises(TargetOwned) as err:
        w.store.apply_schedule(other, now=MORNING)
    assert err.value.http_status == 409 and err.value.reason == "target_owned"
    assert err.value.owner == w.spec.name and err.value.deploy_id == B
    assert w.spec.name in str(err.value) and err.value.path == "targets[1].model_deploy_id"
    assert [(r.name, r.version) for r in w.store.list_schedules()] == before
    assert w.store.owner_of(B) == w.spec.name
    assert w.store.owner_of("md-other") is None


# -- the execution gate ----------------------------------------------------------------------------


def test_gate_off_submits_nothing_and_leaves_status_then_enforce_acts(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=MORNING)
    w.tick(30)  # 07:59:30, enforce: both converged
    w.store.set_gate("off", now=w.clock.now())
    before = w.store.list_status()
    w.run_until(local("2026-10-19T08:05"))
    assert op_triples(w) == []
    assert w.store.list_status() == before
    w.store.set_gate("enforce", now=w.clock.now())
    w.run_until(local("2026-10-19T08:12"))
    assert [(d, k) for d, k, _ in op_triples(w)] == [(B, "stop"), (A, "start")]
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_gate_off_does_not_cancel_an_accepted_action(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=local("2026-10-19T08:00"))
    w.tick(30)  # 08:00: stop B accepted, start A waits for B's GPUs
    assert [(d, k) for d, k, _ in op_triples(w)] == [(B, "stop")]
    w.store.set_gate("off", now=w.clock.now())
    run_for(w, 600)
    stop_b = w.store.list_actions(deploy_id=B)[0]
    assert stop_b.state == "converged"
    assert w.status(B).phase == "converged"
    assert [(d, k) for d, k, _ in op_triples(w)] == [(B, "stop")]  # no new submit
    assert w.deploy(A).state is DeployState.STOPPED


# -- observe ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["schedule_mode", "gate"])
def test_observe_computes_the_plan_and_submits_nothing(sqlite_url: str, how: str) -> None:
    doc = seed_schedule()
    if how == "schedule_mode":
        doc["mode"] = "observe"
    w = make_world(
        sqlite_url,
        schedule=doc,
        start=local("2026-10-19T08:00"),
        gate="observe" if how == "gate" else "enforce",
    )
    run_for(w, 300)
    a, b = w.status(A), w.status(B)
    assert (a.phase, b.phase) == ("observing", "observing")
    assert (a.detail or {})["would"] == [{"step": "start", "replicas": 1}]
    assert (b.detail or {})["would"] == [{"step": "stop", "replicas": None}]
    assert op_triples(w) == []
    assert w.store.list_actions() == []


def test_endpoint_stop_failing_on_one_member_reports_partial_execution(sqlite_url: str) -> None:
    w = make_world(
        sqlite_url,
        schedule=endpoint_schedule(),
        pool=endpoint_pool(a_running=True, b_running=True),
        start=local("2026-10-19T17:59:30"),
    )
    w.pool.inject_fault(FaultSpec(effect="fail_stop", deploy="ep-chat-a"))
    w.run_until(local("2026-10-19T18:03"))
    st = w.status("ep-chat")
    assert (st.phase, st.reason) == ("partial_execution", "partial_execution")
    assert "ep-chat-a" in (st.fix or "") and "ep-chat-b" not in (st.fix or "").split("—")[0]
    receipt = (st.detail or {})["receipt"]
    assert receipt["ep-chat-a"]["result"] == "failed" and receipt["ep-chat-b"]["result"] == "ok"
    assert [(d, k) for d, k, _ in op_triples(w)] == [("ep-chat-b", "stop")]  # the others keep going
    assert w.deploy("ep-chat-a").state is DeployState.READY


class UnreadableGateStore(Store):
    """The real store whose gate row cannot be read (a broken control table)."""

    def get_gate(self) -> str:
        raise RuntimeError("control table unreadable")


def test_unreadable_gate_fails_closed(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=MORNING)
    broken = UnreadableGateStore(w.store.engine)
    w.engine = Engine(broken, w.pool, w.clock, EngineConfig())
    reports = w.run_until(local("2026-10-19T08:05"))
    assert {r.gate for r in reports} == {"off"}
    assert op_triples(w) == [] and w.store.list_actions() == []


def test_observe_gate_then_enforce_acts(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=local("2026-10-19T08:00"), gate="observe")
    run_for(w, 120)
    assert w.status(A).phase == "observing" and op_triples(w) == []
    w.store.set_gate("enforce", now=w.clock.now())
    run_for(w, 480)
    assert [(d, k) for d, k, _ in op_triples(w)] == [(B, "stop"), (A, "start")]
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_target_unreadable_at_the_boundary_opens_no_partial_plan(sqlite_url: str) -> None:
    """A read error on A must not let B's start go ahead alone: B would acquire before A's
    release and A's preflight (here: alias_blocked) would never guard it (R-PASS-6)."""
    pool = a_running_pool()
    pool["nodes"].append(
        {"name": "hgx-03", "gpus": 8}
    )  # room for B beside A: only the plan can stop it
    doc = seed_schedule()
    doc["targets"][0]["default_allow_downtime"] = False
    w = evening(sqlite_url, schedule=doc, pool=pool)
    w.tick(30)
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="get_deploys"))  # the pass's batch read
    w.pool.inject_fault(
        FaultSpec(effect="fail_next", op="get_deploy", deploy=A)
    )  # and A's own read
    report = w.tick(30)
    assert report.schedules[0].errors and not report.schedules[0].opened
    w.run_until(local("2026-10-19T18:05"))
    assert w.status(A).phase == "alias_blocked" and w.status(B).phase == "alias_blocked"
    assert op_triples(w) == []
    assert w.deploy(B).state is DeployState.STOPPED
