"""The simulator's driver surface: stepping time, history, operation log, runtime faults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gps_dagster.backends.sim import SimPool, summarize
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, load_pool, parse_pool
from gps_dagster.ports import AdmissionRefused, BillingRefused, DeployState
from gps_dagster.store.db import create_db_engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)  # Mon 08:00 +07


def seed(url: str) -> tuple[SimPool, VirtualClock]:
    clock = VirtualClock(T0)
    spec = parse_pool((EXAMPLES / "seed-pool-10.yaml").read_text())
    return SimPool.create(create_db_engine(url), spec, clock), clock


def swap_b_for_a(sim: SimPool, clock: VirtualClock) -> None:
    b = sim.get_deploy("md-qwen32b")
    sim.stop(
        "md-qwen32b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="08:00/B/stop"
    )
    clock.advance(90)
    a = sim.get_deploy("md-llama70b")
    sim.start("md-llama70b", etag=a.etag, idempotency_key="08:00/A/start")
    clock.advance(120)
    sim.settle()


def test_usage_history_follows_the_swap(sqlite_url: str) -> None:
    sim, clock = seed(sqlite_url)
    swap_b_for_a(sim, clock)
    points = sim.usage_history()
    at = {p.at - T0: p for p in points}
    assert at[timedelta(0)].in_use == {"md-bge-embed": 2}
    assert at[timedelta(0)].terminating == 6
    assert at[timedelta(seconds=30)].unpublished == 6
    assert at[timedelta(seconds=90)].in_use == {"md-bge-embed": 2, "md-llama70b": 8}
    assert max(p.total_in_use for p in points) == 10
    assert [p.at for p in points] == sorted(p.at for p in points)
    summary = summarize(points, T0 + timedelta(seconds=210))
    assert summary.max_in_use == 10
    assert summary.terminating_gpu_s == 6 * 30
    assert (
        summary.idle_gpu_s == 2 * 90 + 6 * 60
    )  # hgx-02 is C's; 2 free on hgx-01 + B's 6 in the lag
    assert summary.by_holder_gpu_s == {"md-bge-embed": 2 * 210, "md-llama70b": 8 * 120}
    assert summary.in_use_gpu_s == 2 * 210 + 8 * 120


def test_operation_log_records_every_mutation_once(sqlite_url: str) -> None:
    sim, clock = seed(sqlite_url)
    swap_b_for_a(sim, clock)
    b = sim.get_deploy("md-qwen32b")
    sim.stop(
        "md-qwen32b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="08:00/B/stop"
    )  # replay
    log = sim.operation_log()
    assert [(op.idempotency_key, op.kind.value, op.created_at - T0) for op in log] == [
        ("08:00/B/stop", "stop", timedelta(0)),
        ("08:00/A/start", "start", timedelta(seconds=90)),
    ]


def test_settle_applies_due_transitions_and_reports_the_next(sqlite_url: str) -> None:
    sim, clock = seed(sqlite_url)
    assert sim.settle() is None and sim.next_event_at() is None
    b = sim.get_deploy("md-qwen32b")
    rev = sim.revision()
    sim.stop("md-qwen32b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert sim.revision() == rev + 1
    assert sim.settle() == T0 + timedelta(seconds=30)
    clock.advance(30)
    assert sim.settle() == T0 + timedelta(seconds=90)
    clock.advance(60)
    assert sim.settle() is None


def test_a_runtime_fault_is_seen_by_another_process(db_url: str) -> None:
    sim, clock = seed(db_url)
    other = SimPool.open(create_db_engine(db_url), sim.name, clock)
    sim.inject_fault(FaultSpec(effect="alias_guard_unwired"))
    from gps_dagster.ports import AliasGuardUnavailable

    with pytest.raises(AliasGuardUnavailable):
        other.alias_guard("md-llama70b")
    sim.clear_faults()
    assert other.alias_guard("md-llama70b").aliases == ("chat-prod",)


def test_a_fault_naming_an_unknown_deploy_is_refused(sqlite_url: str) -> None:
    sim, _ = seed(sqlite_url)
    with pytest.raises(AdmissionRefused) as err:
        sim.inject_fault(FaultSpec(effect="never_ready", deploy="nope"))
    assert err.value.reason == "unknown_deploy"


def test_clearing_faults_lets_stuck_deploys_proceed(sqlite_url: str) -> None:
    spec = load_pool(
        {
            "name": "p",
            "nodes": [{"name": "n", "gpus": 4}],
            "deploys": [{"id": "x", "gpus_per_replica": 2}, {"id": "y", "gpus_per_replica": 2}],
        }
    )
    clock = VirtualClock(T0)
    sim = SimPool.create(create_db_engine(sqlite_url), spec, clock)
    sim.inject_fault(FaultSpec(effect="never_ready", deploy="x"))
    sim.inject_fault(FaultSpec(effect="unschedulable", deploy="y"))
    for d in ("x", "y"):
        sim.start(d, etag=sim.get_deploy(d).etag, idempotency_key=d)
    clock.advance(1000)
    assert [sim.get_deploy(d).state for d in ("x", "y")] == [DeployState.STARTING] * 2
    sim.clear_faults()
    assert not sim.get_deploy("y").unschedulable
    clock.advance(119)
    assert sim.get_deploy("x").state is DeployState.STARTING
    clock.advance(1)
    assert [sim.get_deploy(d).state for d in ("x", "y")] == [DeployState.READY] * 2


def test_billing_can_change_at_runtime(sqlite_url: str) -> None:
    spec = load_pool(
        {
            "name": "p",
            "nodes": [{"name": "n", "gpus": 4}],
            "projects": {"t": {}},
            "deploys": [{"id": "x", "project": "t", "gpus_per_replica": 2}],
        }
    )
    sim = SimPool.create(create_db_engine(sqlite_url), spec, VirtualClock(T0))
    sim.check_billing("x")
    sim.set_project("t", billing="unpaid")
    with pytest.raises(BillingRefused):
        sim.check_billing("x")


def test_pool_time_never_goes_back(sqlite_url: str) -> None:
    sim, clock = seed(sqlite_url)
    b = sim.get_deploy("md-qwen32b")
    clock.advance(3600)
    sim.stop("md-qwen32b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    late = SimPool.open(sim.engine, sim.name, VirtualClock(T0))  # a process with a lagging clock
    assert late.get_deploy("md-qwen32b").terminating_pods == 1
    assert late.usage_history()[-1].at == T0 + timedelta(hours=1)


def test_a_naive_clock_is_rejected(sqlite_url: str) -> None:
    class Naive:
        def now(self) -> datetime:
            return datetime(2026, 1, 1)

    sim, _ = seed(sqlite_url)
    naive = SimPool.open(sim.engine, sim.name, Naive())
    with pytest.raises(ValueError, match="naive"):
        naive.get_deploy("md-qwen32b")
