"""The transition job, executed in process against the simulated pool (virtual clock)."""

from __future__ import annotations

import dagster as dg
from dagster_support import Runtime

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import plan_request
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.engine import Engine
from tests.engine.cores import DeletedDeploys

A, B = "md-llama70b", "md-qwen32b"


def _run(defs: dg.Definitions, rt: Runtime) -> tuple[dg.ExecuteInProcessResult, dg.RunRequest]:
    report = rt.engine.reconcile(trigger="sensor")
    assert len(report.plans) == 1
    request = plan_request(report.plans[0])
    job = defs.resolve_job_def(request.job_name or "")
    result = job.execute_in_process(
        run_config=request.run_config, tags=request.tags, raise_on_error=False
    )
    return result, request


def _steps(result: dg.ExecuteInProcessResult, kind: str) -> list[str]:
    return [e.step_key or "" for e in result.all_events if e.event_type_value == kind]


def test_release_ops_finish_before_any_acquire_op_starts(defs: dg.Definitions, rt: Runtime) -> None:
    result, request = _run(defs, rt)
    assert result.success
    assert request.job_name == names.TRANSITION_JOB
    starts = _steps(result, "STEP_START")
    successes = _steps(result, "STEP_SUCCESS")
    releases = [s for s in starts if s.startswith("release[")]
    acquires = [s for s in starts if s.startswith("acquire[")]
    assert [s.split("[")[1][: len("md_qwen32b")] for s in releases] == ["md_qwen32b"]
    assert [s.split("[")[1][: len("md_llama70b")] for s in acquires] == ["md_llama70b"]
    assert set(releases) <= set(successes)
    order = [(e.event_type_value, e.step_key) for e in result.all_events]
    first_acquire = order.index(("STEP_START", acquires[0]))
    # every release done first
    assert max(order.index(("STEP_SUCCESS", r)) for r in releases) < first_acquire
    assert order.index(("STEP_SUCCESS", "all_released")) < first_acquire  # through the fan-in
    status = {r.deploy_id: r for r in rt.store.list_status()}
    assert status[B].phase == "releasing"
    assert status[A].phase == "capacity_wait"  # B's GPUs are not published yet: no op waits
    written = [
        (e.kind, e.deploy_id, e.phase) for e in rt.store.list_events() if e.deploy_id is not None
    ]
    assert written == [  # the run's story, in order: B released (accepted), A waits for B's GPUs
        ("phase_changed", B, "releasing"),
        ("action_accepted", B, "releasing"),
        ("phase_changed", A, "capacity_wait"),
    ]
    observed = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert {e.asset_key.to_user_string() for e in observed} == {names.TARGET_STATUS_ASSET}  # type: ignore[union-attr]


def test_failed_release_stops_the_acquire(defs: dg.Definitions, rt: Runtime) -> None:
    rt.core.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy=B, error="permanent"))
    result, _ = _run(defs, rt)
    assert not result.success
    assert [s for s in _steps(result, "STEP_FAILURE") if s.startswith("release[")]
    assert not [s for s in _steps(result, "STEP_START") if s.startswith("acquire[")]
    status = {r.deploy_id: r for r in rt.store.list_status()}
    assert status[A].phase not in ("acquiring", "awaiting_ready", "converged")
    assert rt.core.get_deploy(A).state.value == "STOPPED"
    # the acquire op never runs, so the engine itself must end A's step with the release (issue 9 §4):
    (start_a,) = rt.store.list_actions(deploy_id=A)
    (stop_b,) = rt.store.list_actions(deploy_id=B)
    assert (start_a.state, start_a.reason) == ("cancelled", stop_b.reason)
    assert (status[A].phase, status[A].reason) == (status[B].phase, status[B].reason)
    assert status[A].phase == "ineligible" and f"{A} not touched" in (status[A].fix or "")
    assert rt.store.get_transition(start_a.transition_id).state == "failed"  # type: ignore[union-attr]
    # nothing left for a resume run to pick up
    assert not rt.store.list_transitions(states=("open",))


def test_release_op_of_a_plan_whose_acquire_deploy_was_deleted_ends_the_plan(
    defs: dg.Definitions, rt: Runtime
) -> None:
    """Issue 9 §2.1 on Dagster: the release op used to raise NotFound, and a failing resume run
    was launched every tick. Now the op fails once with a reason, and nothing is left to resume."""
    report = rt.engine.reconcile(trigger="sensor")
    (plan,) = report.plans
    gone = DeletedDeploys(rt.core)
    gone.delete(A)  # A is deleted from the control plane after its plan opened
    rt.engine = Engine(rt.store, gone, rt.clock)  # type: ignore[arg-type]  # what the ops see from now on
    request = plan_request(plan)
    result = defs.resolve_job_def(request.job_name or "").execute_in_process(
        run_config=request.run_config, tags=request.tags, raise_on_error=False
    )
    assert not result.success
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key.split("[")[0] for e in failures] == ["release"]  # type: ignore[union-attr]
    assert "target_failed" in str(failures[0].event_specific_data)
    assert rt.core.get_deploy(B).state.value == "READY"  # B is not stopped for an A that is gone
    assert {a.state for a in rt.store.list_actions(transition_id=plan.transition_id)} == {
        "failed",
        "cancelled",
    }
    assert not rt.store.list_transitions(states=("open",))


def test_run_tags_name_schedule_targets_interval_and_trigger(
    defs: dg.Definitions, rt: Runtime
) -> None:
    result, request = _run(defs, rt)
    tags = result.dagster_run.tags
    assert tags[names.TAG_SCHEDULE] == "gpu-pool-h100-shared"
    assert set(tags[names.TAG_TARGETS].split(",")) == {A, B}
    assert tags[names.TAG_INTERVAL].startswith("2026-10-19T")
    assert tags[names.TAG_TRIGGER] == "sensor"
    assert tags[names.TAG_PHASE] == "plan"
    assert request.run_key == f"{tags[names.TAG_TRANSITION]}:plan"
