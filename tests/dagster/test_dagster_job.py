"""The transition job, executed in process against the simulated pool (virtual clock)."""

from __future__ import annotations

import dagster as dg
from dagster_support import Runtime

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import plan_request
from gps_dagster.domain.pool import FaultSpec

A, B = "md-llama70b", "md-qwen32b"


def _run(defs: dg.Definitions, rt: Runtime) -> tuple[dg.ExecuteInProcessResult, dg.RunRequest]:
    report = rt.engine.reconcile(trigger="sensor")
    assert len(report.plans) == 1
    request = plan_request(report.plans[0])
    job = defs.resolve_job_def(request.job_name or "")
    result = job.execute_in_process(run_config=request.run_config, tags=request.tags, raise_on_error=False)
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
    last_release_done = max(successes.index(s) for s in releases)
    first_acquire = starts.index(acquires[0])
    all_events = [(e.event_type_value, e.step_key) for e in result.all_events]
    assert all_events.index(("STEP_SUCCESS", releases[0])) < all_events.index(("STEP_START", acquires[0]))
    assert last_release_done >= 0 and first_acquire > starts.index("all_released")
    status = {r.deploy_id: r for r in rt.store.list_status()}
    assert status[B].phase == "releasing"
    assert status[A].phase == "capacity_wait"  # B's GPUs are not published yet: no op waits
    kinds = {e.kind for e in rt.store.list_events()}
    assert kinds, "the engine writes events for the transition"
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


def test_run_tags_name_schedule_targets_interval_and_trigger(defs: dg.Definitions, rt: Runtime) -> None:
    result, request = _run(defs, rt)
    tags = result.dagster_run.tags
    assert tags[names.TAG_SCHEDULE] == "gpu-pool-h100-shared"
    assert set(tags[names.TAG_TARGETS].split(",")) == {A, B}
    assert tags[names.TAG_INTERVAL].startswith("2026-10-19T")
    assert tags[names.TAG_TRIGGER] == "sensor"
    assert tags[names.TAG_PHASE] == "plan"
    assert request.run_key == f"{tags[names.TAG_TRANSITION]}:plan"
