"""The seed's two swaps driven by hand through the port, as the engine will drive them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import parse_pool
from gps_dagster.ports import DeployState, Fits, Insufficient
from gps_dagster.store.db import create_db_engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(url: str, name: str, start: datetime) -> tuple[SimPool, VirtualClock]:
    clock = VirtualClock(start)
    spec = parse_pool((EXAMPLES / name).read_text())
    return SimPool.create(create_db_engine(url), spec, clock), clock


def wait_until_fits(
    sim: SimPool, clock: VirtualClock, deploy: str, delta: int, limit_s: int
) -> int:
    waited = 0
    while not isinstance(sim.preview_capacity(deploy, delta_replicas=delta), Fits):
        assert waited < limit_s, f"{deploy} never fits"
        clock.advance(5)
        waited += 5
    return waited


def test_scenario_2_scales_a_with_zero_downtime(db_url: str) -> None:
    sim, clock = load(
        db_url, "seed-pool-16.yaml", datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
    )  # Mon 08:00 +07
    a_ready = []
    q = sim.get_deploy("md-qwen-8gpu")
    sim.stop(
        "md-qwen-8gpu", etag=q.etag, allow_aliased_downtime=False, idempotency_key="08:00/q/stop"
    )
    assert isinstance(sim.preview_capacity("md-llama70b", delta_replicas=1), Insufficient)
    assert wait_until_fits(sim, clock, "md-llama70b", 1, 900) == 90  # grace 30 s + publish lag 60 s
    a = sim.get_deploy("md-llama70b")
    sim.set_replica_intent("md-llama70b", 2, etag=a.etag, idempotency_key="08:00/A/scale")
    for _ in range(25):
        clock.advance(5)
        a_ready.append(sim.get_deploy("md-llama70b").ready_replicas)
    a = sim.get_deploy("md-llama70b")
    assert (a.state, a.ready_replicas, a.role_max) == (DeployState.READY, 2, 2)
    assert min(a_ready) >= 1  # A served throughout

    clock.set(datetime(2026, 10, 19, 11, 0, tzinfo=UTC))  # 18:00 +07
    sim.set_replica_intent("md-llama70b", 1, etag=a.etag, idempotency_key="18:00/A/scale")
    assert sim.get_deploy("md-llama70b").ready_replicas == 1
    assert wait_until_fits(sim, clock, "md-qwen-8gpu", 1, 900) == 90
    q = sim.get_deploy("md-qwen-8gpu")
    sim.start("md-qwen-8gpu", etag=q.etag, idempotency_key="18:00/q/start")
    clock.advance(120)
    assert sim.get_deploy("md-qwen-8gpu").state is DeployState.READY
    assert max(p.total_in_use for p in sim.usage_history()) == 16


def test_seed_swap_never_exceeds_ten_gpus(sqlite_url: str) -> None:
    sim, clock = load(sqlite_url, "seed-pool-10.yaml", datetime(2026, 10, 19, 1, 0, tzinfo=UTC))
    b = sim.get_deploy("md-qwen32b")
    sim.stop("md-qwen32b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="b")
    wait_until_fits(sim, clock, "md-llama70b", 1, 900)
    a = sim.get_deploy("md-llama70b")
    sim.start("md-llama70b", etag=a.etag, idempotency_key="a")
    clock.advance(120)
    assert sim.get_deploy("md-llama70b").state is DeployState.READY
    assert max(p.total_in_use for p in sim.usage_history()) == 10
