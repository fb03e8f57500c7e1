"""Review findings in the Dagster layer: the transition job driven like the daemon would."""

from __future__ import annotations

import warnings

import dagster as dg

from gps_dagster.dagster_defs import StaticRuntime, build_definitions
from gps_dagster.dagster_defs.sensors import capacity_tick, reconcile_tick
from gps_dagster.domain.phases import is_terminal
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.engine.tick_cursors import ReconcileCursor
from gps_dagster.runtime import Runtime, Settings
from tests.engine.harness import A, B, a_running_pool, local, make_world

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

EVENING = local("2026-10-19T17:59:30")


def test_release_failing_inside_its_op_ends_the_acquire_target_terminal_and_stops_launching_runs(
    sqlite_url: str,
) -> None:
    """'Every wait ... ends in a terminal phase'; a failed release must not leave B pending
    forever."""
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.tick(30)  # 17:59:30 nothing to do; now 18:00
    rt = Runtime(Settings(), w.store, w.pool, w.engine, w.clock)
    defs = build_definitions(StaticRuntime(rt))
    launched: list[dict[str, str]] = []
    with dg.instance_for_test() as instance:

        def launch(requests: list[dg.RunRequest]) -> None:
            for req in requests:
                if req.run_key and instance.get_runs_count(
                    dg.RunsFilter(tags={"dagster/run_key": req.run_key})
                ):
                    continue  # the daemon drops a run key it has seen
                tags = dict(req.tags)
                if req.run_key:
                    tags["dagster/run_key"] = req.run_key
                job = defs.resolve_job_def(req.job_name or "")
                job.execute_in_process(
                    run_config=req.run_config, tags=tags, instance=instance, raise_on_error=False
                )
                launched.append(tags)

        cursor = ReconcileCursor()
        requests, cursor, _ = reconcile_tick(
            rt, cursor, instance
        )  # 18:00: plan opened (preflight passed)
        assert requests
        w.pool.inject_fault(
            FaultSpec(effect="alias_guard_unwired", deploy=A)
        )  # guard breaks before the op
        launch(requests)
        assert w.status(A).phase == "alias_blocked"
        for _ in range(40):  # 20 minutes of sensor ticks
            w.clock.advance(30)
            w.pool.settle()
            requests, cursor, _ = reconcile_tick(rt, cursor, instance)
            launch(requests)
            launch(capacity_tick(rt, instance))
    st = w.status(B)
    assert is_terminal(st.phase), (st.phase, st.reason, len(launched))
    assert len(launched) <= 2, f"{len(launched)} runs launched for one failed plan"


def test_apply_now_for_a_schedule_deleted_since_the_request_is_answered_and_does_not_block_others(
    sqlite_url: str,
) -> None:
    """R-DAG-6: every apply-now request gets an answer; one bad request must not wedge the
    sensor."""
    from gps_dagster.dagster_defs.sensors import apply_now_tick
    from gps_dagster.domain.schedules import load_schedule
    from tests.engine.harness import seed_schedule

    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    doc = seed_schedule()
    doc["name"] = "other"
    doc["targets"] = [{"model_deploy_id": "md-bge-embed", "default_state": "running"}]
    doc["windows"] = []
    w.store.apply_schedule(load_schedule(doc), now=w.clock.now())
    rt = Runtime(Settings(), w.store, w.pool, w.engine, w.clock)
    first = w.store.request_apply_now(w.spec.name, now=w.clock.now())
    second = w.store.request_apply_now("other", now=w.clock.now())
    w.store.delete_schedule(w.spec.name, now=w.clock.now())
    try:
        apply_now_tick(rt)
    except Exception as exc:
        raised = exc
    else:
        raised = None
    assert raised is None, f"apply-now sensor tick raised {raised!r}; it will raise on every tick"
    assert w.store.get_apply_now(first).state != "pending"
    assert w.store.get_apply_now(second).state == "done"
