"""Re-execution never lies (issue 20 §2), through Dagster's own re-execution API.

The plan run of Monday 08:00 fails at A's acquire (its capacity was taken between the preview
and the submit); a later boundary (18:00) replaces the plan. "Re-execute all" of the failed run
used to go green — ``acquire[md_llama70b]`` and ``done`` succeeded — while no pool operation was
made and A stayed stopped. ``dg.execute_job`` with ``ReexecutionOptions`` is what the UI's
"Re-execute all" / "Re-execute from failure" buttons launch (``launchPipelineReexecution`` →
``ReexecutionOptions``: https://docs.dagster.io/guides/build/jobs/job-execution#re-execution).
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest
from dagster_support import Runtime

from gps_dagster.dagster_defs import jobs
from gps_dagster.dagster_defs.plans import plan_request
from gps_dagster.engine.reports import StepOutcome
from tests.dagster import reexec_jobs

A, B = "md-llama70b", "md-qwen32b"
TEN_HOURS = 10 * 3600


@pytest.fixture
def served(rt: Runtime) -> Iterator[Runtime]:
    reexec_jobs.SERVED["runtime"] = rt
    yield rt
    reexec_jobs.SERVED.clear()


def _failed_plan_run(
    rt: Runtime, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> tuple[dg.JobExecutionResult, str]:
    (plan,) = rt.engine.reconcile(trigger="sensor").plans
    request = plan_request(plan)
    with monkeypatch.context() as m:  # the capacity is taken between preview and submit
        m.setattr(jobs, "_preview", lambda runtime, step_id: StepOutcome(step_id, "", "ready"))
        result = dg.execute_job(
            reexec_jobs.reconstructable(request.job_name or ""),
            instance,
            run_config=request.run_config,
            tags=request.tags,
        )
    assert not result.success
    return result, plan.transition_id


def _pool_operations(rt: Runtime) -> int:
    """Every operation the simulated pool ever accepted (its ``sim_operations`` rows)."""
    import sqlalchemy as sa

    from gps_dagster.backends.sim import schema

    with rt.store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(schema.operations)).scalar())


def _events(result: dg.JobExecutionResult, kind: str) -> list[str]:
    return [
        (e.step_key or "").split("[")[0] for e in result.all_events if e.event_type_value == kind
    ]


def _failure_texts(result: dg.JobExecutionResult) -> list[str]:
    return [
        str(e.event_specific_data)
        for e in result.all_events
        if e.event_type_value == "STEP_FAILURE"
    ]


def test_re_execute_all_of_a_superseded_plan_run_fails_with_the_plan_that_replaced_it(
    served: Runtime, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = served
    failed, tid = _failed_plan_run(rt, instance, monkeypatch)
    rt.clock.advance(TEN_HOURS)  # 18:00: the next boundary replaces the plan
    (newer,) = rt.engine.reconcile(trigger="sensor").plans
    assert rt.store.get_transition(tid).state == "superseded"  # type: ignore[union-attr]
    operations = _pool_operations(rt)

    again = dg.execute_job(
        reexec_jobs.reconstructable(failed.dagster_run.job_name),
        instance,
        reexecution_options=dg.ReexecutionOptions(parent_run_id=failed.run_id),
    )

    assert not again.success
    assert _events(again, "STEP_FAILURE") == ["plan"]
    assert "acquire" not in _events(again, "STEP_SUCCESS")
    assert "done" not in _events(again, "STEP_SUCCESS")
    (text,) = _failure_texts(again)
    assert f"superseded by plan {newer.transition_id}" in text
    assert newer.interval_start.isoformat() in text
    assert rt.core.get_deploy(A).state.value == "STOPPED"
    assert _pool_operations(rt) == operations  # no pool operation made
    assert again.dagster_run.parent_run_id == failed.run_id  # Dagster's own re-execution


def test_re_execute_from_failure_of_a_superseded_plan_run_fails_its_acquire_with_the_reason(
    served: Runtime, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = served
    failed, _ = _failed_plan_run(rt, instance, monkeypatch)
    rt.clock.advance(TEN_HOURS)
    (newer,) = rt.engine.reconcile(trigger="sensor").plans
    operations = _pool_operations(rt)

    again = dg.execute_job(
        reexec_jobs.reconstructable(failed.dagster_run.job_name),
        instance,
        reexecution_options=dg.ReexecutionOptions.from_failure(failed.run_id, instance),
    )

    assert not again.success
    assert _events(again, "STEP_FAILURE") == ["acquire"]  # only the failed op ran again
    assert "done" not in _events(again, "STEP_SUCCESS")
    (text,) = _failure_texts(again)
    assert f"superseded by plan {newer.transition_id}" in text
    assert rt.core.get_deploy(A).state.value == "STOPPED"
    assert _pool_operations(rt) == operations


def test_re_execute_all_of_a_finished_plan_says_it_is_closed_not_done_again(
    served: Runtime, instance: dg.DagsterInstance
) -> None:
    """A plan whose steps all finished (its run green): running it again makes no pool
    operation, so the re-execution ends at the plan op saying so."""
    rt = served
    reexec_jobs.SERVED["capacity_poll_s"] = 120.0  # B's GPUs publish within the watch
    (plan,) = rt.engine.reconcile(trigger="sensor").plans
    request = plan_request(plan)
    job = reexec_jobs.reconstructable(request.job_name or "")
    first = dg.execute_job(job, instance, run_config=request.run_config, tags=request.tags)
    assert first.success
    for _ in range(40):  # converge both steps on the virtual clock
        rt.clock.advance(15)
        rt.engine.reconcile(trigger="sensor")
    assert rt.store.get_transition(plan.transition_id).state == "done"  # type: ignore[union-attr]
    again = dg.execute_job(
        job, instance, reexecution_options=dg.ReexecutionOptions(parent_run_id=first.run_id)
    )
    assert not again.success
    (text,) = _failure_texts(again)
    assert "is closed (done)" in text and "no pool operation" in text
