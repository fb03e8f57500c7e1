"""The transition job, executed in process against the simulated pool (virtual clock)."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster_support import Runtime

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names
from gps_dagster.dagster_defs.plans import plan_request
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.engine import Engine
from gps_dagster.engine.reports import StepOutcome
from tests.engine.cores import DeletedDeploys

A, B = "md-llama70b", "md-qwen32b"


def _run(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance | None = None
) -> tuple[dg.ExecuteInProcessResult, dg.RunRequest]:
    report = rt.engine.reconcile(trigger="sensor")
    assert len(report.plans) == 1
    request = plan_request(report.plans[0])
    job = defs.resolve_job_def(request.job_name or "")
    result = job.execute_in_process(
        run_config=request.run_config, tags=request.tags, raise_on_error=False, instance=instance
    )
    return result, request


def _steps(result: dg.ExecuteInProcessResult, kind: str) -> list[str]:
    return [e.step_key or "" for e in result.all_events if e.event_type_value == kind]


def _kinds(keys: list[str]) -> list[str]:
    return [k.split("[")[0] for k in keys]


def test_release_ops_finish_before_any_acquire_op_starts_and_a_deferred_acquire_is_skipped(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    result, request = _run(defs, rt, instance)
    assert result.success
    assert request.job_name == names.TRANSITION_JOB
    starts = _steps(result, "STEP_START")
    successes = _steps(result, "STEP_SUCCESS")
    releases = [s for s in starts if s.startswith("release[")]
    admits = [s for s in starts if s.startswith("admit[")]
    assert [s.split("[")[1][: len("md_qwen32b")] for s in releases] == ["md_qwen32b"]
    assert [s.split("[")[1][: len("md_llama70b")] for s in admits] == ["md_llama70b"]
    assert set(releases) <= set(successes)
    order = [(e.event_type_value, e.step_key) for e in result.all_events]
    first_admit = order.index(("STEP_START", admits[0]))
    # every release done first
    assert max(order.index(("STEP_SUCCESS", r)) for r in releases) < first_admit
    assert order.index(("STEP_SUCCESS", "all_released")) < first_admit  # through the fan-in
    # B's GPUs are not published yet: the acquire of A is deferred, never shown as succeeded
    assert _kinds(_steps(result, "STEP_SKIPPED")) == ["acquire", "done"]
    assert "capacity_wait" in _kinds(successes) and "acquire" not in _kinds(starts)
    status = {r.deploy_id: r for r in rt.store.list_status()}
    assert status[B].phase == "releasing"
    assert status[A].phase == "capacity_wait"
    written = [
        (e.kind, e.deploy_id, e.phase) for e in rt.store.list_events() if e.deploy_id is not None
    ]
    assert written == [  # the run's story, in order: B released (accepted), A waits for B's GPUs
        ("phase_changed", B, "releasing"),
        ("action_accepted", B, "releasing"),
        ("phase_changed", A, "capacity_wait"),
    ]
    # each op recorded its deploy's phase on the deploy's own asset
    for deploy, phase in ((B, "releasing"), (A, "capacity_wait")):
        key = dg.AssetKey(["deploy", deploy.replace("-", "_")])
        (record,) = instance.fetch_materializations(key, limit=1).records
        meta = record.asset_materialization.metadata  # type: ignore[union-attr]
        assert meta["phase"].value == phase
        assert {"reason", "fix", "interval", "intent"} <= set(meta)


def test_capacity_published_within_the_watch_is_acquired_in_the_same_run(
    rt: Runtime, instance: dg.DagsterInstance
) -> None:
    """The admit op watches the preview up to ``capacity_poll_s``: B's GPUs (30 s grace + 60 s
    publish lag in the seed pool) are published within a 120 s watch, so A's acquire runs in
    the plan run itself — the way under the capacity-wait sensor's ~5 s tick floor."""
    defs = build_definitions(
        StaticRuntime(rt, capacity_poll_s=120, sleeper=rt.clock.advance)  # type: ignore[attr-defined]
    )
    result, _ = _run(defs, rt, instance)
    assert result.success
    assert "acquire" in _kinds(_steps(result, "STEP_SUCCESS"))
    assert _kinds(_steps(result, "STEP_SKIPPED")) == ["capacity_wait"]
    (start_a,) = rt.store.list_actions(deploy_id=A)
    assert start_a.state == "accepted"


def test_a_capacity_taken_between_preview_and_submit_fails_the_acquire_op_honestly(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gps_dagster.dagster_defs import jobs

    monkeypatch.setattr(
        jobs, "_preview", lambda runtime, step_id: StepOutcome(step_id, "", "ready")
    )
    result, _ = _run(defs, rt, instance)
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key.startswith("acquire[")  # type: ignore[union-attr]
    assert "NOT submitted" in str(failure.event_specific_data)
    assert rt.store.list_actions(deploy_id=A)[0].state == "capacity_wait"


def test_failed_release_stops_the_acquire(defs: dg.Definitions, rt: Runtime) -> None:
    rt.core.inject_fault(FaultSpec(effect="fail_next", op="stop", deploy=B, error="permanent"))
    result, _ = _run(defs, rt)
    assert not result.success
    assert [s for s in _steps(result, "STEP_FAILURE") if s.startswith("release[")]
    assert not [s for s in _steps(result, "STEP_START") if s.startswith("acquire[")]
    status = {r.deploy_id: r for r in rt.store.list_status()}
    assert status[A].phase not in ("acquiring", "awaiting_ready", "converged")
    assert rt.core.get_deploy(A).state.value == "STOPPED"
    # the acquire op never runs, so the engine itself must end A's step with the release
    # (issue 9 §4):
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


def test_with_the_gate_off_the_acquire_is_skipped_not_shown_as_done(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    (plan,) = rt.engine.reconcile(trigger="sensor").plans
    rt.store.set_gate("off", now=rt.clock.now())  # turned off after the plan opened
    request = plan_request(plan)
    result = defs.resolve_job_def(request.job_name or "").execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance
    )
    assert result.success  # nothing went wrong: the plan waits for the gate
    skipped = sorted(_kinds(_steps(result, "STEP_SKIPPED")))
    assert skipped == ["acquire", "capacity_wait", "done"]
    assert {a.state for a in rt.store.list_actions()} == {"pending"}


def test_a_plan_run_says_in_one_line_what_it_releases_and_acquires(
    defs: dg.Definitions, rt: Runtime
) -> None:
    """Issue 20 §3: the Runs list shows the swap (the ``gps/swap`` tag), not only ids."""
    (plan,) = rt.engine.reconcile(trigger="sensor").plans
    request = plan_request(plan)
    assert request.tags[names.TAG_SWAP] == f"release {B} → acquire {A}"
