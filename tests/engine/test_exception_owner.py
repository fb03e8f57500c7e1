"""Every exception has an owner (SPEC R-PASS-15; issue 9 §2.1 and §2.3).

A step's errors become a retry on the step's own clock or a terminal phase
with a reason and a fix; one schedule's failure never stops another's. Each
test drives the real engine over the real simulated pool and database; the
only fakes are delegating cores that delete a deploy or raise an error the
pool cannot declare (``tests/engine/cores.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gps_dagster.domain.phases import is_terminal
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import DeployState
from tests.engine.cores import DeletedDeploys, RaisingCore
from tests.engine.harness import A, B, C, World, a_running_pool, local, make_world, op_triples

EVENING = local("2026-10-19T17:59:30")


def embed_nights(start: datetime) -> dict[str, Any]:
    """A second schedule on the page, after the seed's: C stops at 18:00 for an hour."""
    return {
        "name": "zz-embed-nights",
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [
            {"model_deploy_id": C, "default_state": "running", "default_allow_downtime": True}
        ],
        "windows": [
            {
                "name": "quiet",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 18 * * 1-5",
                "duration": "1h",
                "states": [{"model_deploy_id": C, "desired_state": "stopped"}],
            }
        ],
    }


def two_schedules(url: str, core_of: Any = None) -> World:
    w = make_world(url, pool=a_running_pool(), start=EVENING)
    w.store.apply_schedule(load_schedule(embed_nights(EVENING)), now=EVENING)
    if core_of is not None:
        w.engine = Engine(w.store, core_of(w), w.clock, EngineConfig(holder="engine-1"))
    return w


# -- 2.1: one error stops every schedule ---------------------------------------------------------


def test_2_1_deploy_deleted_after_its_plan_opened_ends_the_release_and_other_schedules_still_run(
    sqlite_url: str,
) -> None:
    deleted: dict[str, DeletedDeploys] = {}

    def core(w: World) -> DeletedDeploys:
        deleted["core"] = DeletedDeploys(w.pool)
        return deleted["core"]

    w = two_schedules(sqlite_url, core)
    w.tick(30)  # 17:59:30
    # 18:00: both plans open (e.g. the Dagster sensor), nothing executed yet
    opened = w.engine.reconcile()
    assert len(opened.plans) == 2
    deleted["core"].delete(B)  # B, to be started after A stops, is deleted from the control plane
    report = w.engine.run_pass()  # used to raise NotFound out of the pass (and out of `engine run`)
    assert report.errors == []
    (stop_a,) = w.store.list_actions(deploy_id=A)
    assert (stop_a.state, stop_a.reason) == ("failed", "target_failed")
    assert f"{B} failed preflight" in (stop_a.fix or "") and f"{A} left as it is" in (
        stop_a.fix or ""
    )
    assert w.status(A).phase == "ineligible" and is_terminal(w.status(A).phase)
    assert w.deploy(A).state is DeployState.READY  # A is not stopped for a B that no longer exists
    (start_b,) = w.store.list_actions(deploy_id=B)
    assert start_b.state == "cancelled"
    # the next schedule on the page ran
    assert [(d, k) for d, k, _ in op_triples(w)] == [(C, "stop")]
    assert w.store.get_transition(stop_a.transition_id).state == "failed"  # type: ignore[union-attr]


def test_2_1_an_unknown_exception_in_a_step_is_retried_and_the_pass_goes_on(
    sqlite_url: str,
) -> None:
    bug: dict[str, RaisingCore] = {}

    def core(w: World) -> RaisingCore:
        bug["core"] = RaisingCore(
            w.pool,
            "stop",
            lambda: RuntimeError("adapter bug: 'NoneType' has no attribute"),
            deploy=A,
            times=2,
        )
        return bug["core"]

    w = two_schedules(sqlite_url, core)
    # 17:59:30, 18:00:00 (raises), 18:00:30 (raises), then fine
    reports = [w.tick(30) for _ in range(3)]
    assert all(r.errors == [] for r in reports)
    assert bug["core"].raised == 2
    retries = [
        e for e in w.store.list_events(limit=1000) if e.kind == "step_retry" and e.deploy_id == A
    ]
    assert [e.reason for e in retries] == ["engine_error", "engine_error"]
    assert "adapter bug" in retries[0].detail["error"]  # type: ignore[index]
    # the other schedule was not held up
    assert (C, "stop") in [(d, k) for d, k, _ in op_triples(w)]
    w.run_until(local("2026-10-19T18:08"))
    assert [(d, k) for d, k, _ in op_triples(w) if d != C] == [(A, "stop"), (B, "start")]
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"


def test_2_1_an_unknown_exception_that_never_stops_ends_the_step_at_its_deadline(
    sqlite_url: str,
) -> None:
    w = make_world(
        sqlite_url, pool=a_running_pool(), start=EVENING, config=EngineConfig(stop_timeout_s=300)
    )
    w.tick(30)
    w.engine.reconcile()  # 18:00: the plan opens; from now on the alias guard read raises a bug
    w.engine = Engine(
        w.store,
        RaisingCore(w.pool, "alias_guard", lambda: KeyError("md-llama70b")),  # type: ignore[arg-type]
        w.clock,
        EngineConfig(stop_timeout_s=300),
    )
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("stop_timeout", "engine_error"), (st.phase, st.reason)
    assert "report it" in (st.fix or "") and "left as it is" in (st.fix or "")
    assert st.phase_since <= local("2026-10-19T18:05")  # first failure 18:00 + 300 s, never later
    assert (
        w.status(B).phase == "stop_timeout"
        and w.store.list_actions(deploy_id=B)[0].state == "cancelled"
    )
    assert w.deploy(A).state is DeployState.READY and op_triples(w) == []


def test_2_1_a_schedule_whose_visit_raises_is_recorded_and_the_next_schedule_still_runs(
    sqlite_url: str,
) -> None:
    w = two_schedules(sqlite_url)
    real = w.engine.planner.visit

    def visit(record: Any, **kw: Any) -> Any:
        if record.name == w.spec.name:
            raise ZeroDivisionError("planner bug")
        return real(record, **kw)

    w.engine.planner.visit = visit  # type: ignore[method-assign]
    w.tick(30)
    report = w.tick(30)  # 18:00
    assert report.errors == [f"{w.spec.name}: ZeroDivisionError: planner bug"] * 1
    events = [e for e in w.store.list_events(limit=1000) if e.kind == "schedule_error"]
    assert (
        events and events[-1].schedule == w.spec.name and events[-1].reason == "ZeroDivisionError"
    )
    assert [(d, k) for d, k, _ in op_triples(w)] == [(C, "stop")]


# -- 2.3: a transient error in the release-time re-check has no clock ------------------------------


def test_2_3_transient_errors_in_the_release_time_recheck_end_the_release_at_its_clock(
    sqlite_url: str,
) -> None:
    w = make_world(
        sqlite_url, pool=a_running_pool(), start=EVENING, config=EngineConfig(stop_timeout_s=600)
    )
    w.tick(30)
    w.engine.reconcile()  # 18:00: the plan opens (preflight passed); the release has not run yet
    w.pool.inject_fault(FaultSpec(effect="fail_next", op="get_deploy", deploy=B, times=100_000))
    w.run_until(local("2026-10-19T18:05"))
    assert w.status(A).phase == "pending"  # retried, not given up at the first error
    w.run_until(local("2026-10-19T18:30"))  # used to stay pending for hours
    st = w.status(A)
    assert (st.phase, st.reason) == ("stop_timeout", "core_unreadable"), (st.phase, st.reason)
    assert local("2026-10-19T18:09") <= st.phase_since <= local("2026-10-19T18:10")  # 18:00 + 600 s
    assert "left as it is" in (st.fix or "") and "control plane" in (st.fix or "")
    assert w.store.list_actions(deploy_id=B)[0].state == "cancelled"
    assert w.deploy(A).state is DeployState.READY and op_triples(w) == []
