"""Placement with reservations in the simulated pool (R-GPS-2, R-GPS-7, R-GPS-8).

Bound replicas land only on their reservations' GPUs, unbound work and
intruders never land on reserved GPUs, the witness reports what placement
gave each ready replica, and only the ``misplace`` fault breaks the rule.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from gps_fixtures import GPU42_UUID
from gps_sim import NODE, RSV, Sim, open_sim, shared_pool

from gps_dagster.backends.sim import snapshot
from gps_dagster.domain.pool import FaultSpec, PoolSpec, gpu_uuid, load_pool
from gps_dagster.ports import Fits, Insufficient, QuotaRefused, ReservationBinding

POOL = "two-nodes"
R1 = [gpu_uuid(POOL, "n1", i) for i in range(4)]
R2 = [gpu_uuid(POOL, "n2", i) for i in range(4)]


def _rsv(rid: str, node: str, uuids: list[str]) -> dict[str, object]:
    return {
        "id": rid,
        "node": node,
        "gpu_uuids": uuids,
        "namespace": "serving",
        "mode": "exclusive",
        "gpu_memory_mib": 81559,
    }


def exclusive_pool(**sim: object) -> PoolSpec:
    return load_pool(
        {
            "name": POOL,
            "nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}],
            "reservations": [_rsv("rsv-r1", "n1", R1), _rsv("rsv-r2", "n2", R2)],
            "deploys": [
                {
                    "id": "a",
                    "gpus_per_replica": 4,
                    "replicas": 2,
                    "reservation": {"mode": "exclusive", "reservations": ["rsv-r1", "rsv-r2"]},
                },
                {
                    "id": "b",
                    "gpus_per_replica": 4,
                    "reservation": {"mode": "exclusive", "reservations": ["rsv-r2"]},
                },
                {"id": "free-rider", "gpus_per_replica": 8},
            ],
            "sim": {
                "timings": {"stop_grace_s": 30, "publish_lag_s": 60, "start_delay_s": 120},
                **sim,
            },
        }
    )


def held_by(sim: Sim, holder: str) -> set[str]:
    return {g.uuid for g in snapshot(sim.pool).gpus if g.holder == holder and g.state == "held"}


def test_bound_replicas_land_only_on_their_reservations(sqlite_url: str) -> None:
    sim = open_sim(sqlite_url, exclusive_pool())
    sim.start("a")
    assert held_by(sim, "a") == set(R1) | set(R2)
    assert sim.pool.get_deploy("a").reservation == ReservationBinding(
        ("rsv-r1", "rsv-r2"), "exclusive"
    )
    assert isinstance(
        sim.pool.preview_capacity("b", delta_replicas=1), Insufficient
    )  # R2 is full: b waits
    sim.start("b")
    assert held_by(sim, "b") == set() and sim.pool.get_deploy("b").unschedulable
    sim.clock.advance(timedelta(minutes=3))
    sim.stop("a")
    sim.clock.advance(timedelta(minutes=2))  # grace + publish: R2's GPUs come back, b takes them
    assert held_by(sim, "b") == set(R2)


def test_unbound_work_and_intruders_never_take_reserved_gpus(sqlite_url: str) -> None:
    sim = open_sim(
        sqlite_url, exclusive_pool(foreign=[{"id": "grabber", "kind": "intruder", "gpus": 16}])
    )
    sim.start("free-rider")  # 8 GPUs on one node: only 4 unreserved per node, so it cannot fit
    assert sim.pool.get_deploy("free-rider").unschedulable
    assert isinstance(sim.pool.preview_capacity("free-rider", delta_replicas=1), Insufficient)
    sim.pool.grab_now()
    grabbed = held_by(sim, "grabber")
    assert len(grabbed) == 8 and not grabbed & (set(R1) | set(R2))
    assert isinstance(sim.pool.preview_capacity("a", delta_replicas=2), Fits)


def test_the_witness_reports_each_ready_replica(sqlite_url: str) -> None:
    sim = open_sim(sqlite_url, exclusive_pool())
    sim.start("a")
    assert sim.pool.witness("a").replicas == ()  # starting: no evidence yet
    sim.clock.advance(timedelta(minutes=2))
    seen = sim.pool.witness("a")
    assert seen.source == "sim_placement" and [set(r) for r in seen.replicas] == [set(R1), set(R2)]


def test_only_the_misplace_fault_puts_a_bound_replica_outside(sqlite_url: str) -> None:
    sim = open_sim(sqlite_url, exclusive_pool())
    sim.pool.inject_fault(FaultSpec(effect="misplace", deploy="b"))
    sim.start("b")
    sim.clock.advance(timedelta(minutes=2))
    got = set(sim.pool.witness("b").uuids)
    assert len(got) == 4 and not got & set(R2)


def test_a_time_sliced_member_is_witnessed_on_the_reserved_gpu_and_misplaced_by_fault(
    sqlite_url: str,
) -> None:
    sim = open_sim(sqlite_url, shared_pool({"md-a": 1_000, "md-b": 1_000}))
    sim.pool.inject_fault(FaultSpec(effect="misplace", deploy="md-b"))
    sim.start("md-a")
    sim.start("md-b")
    sim.clock.advance(timedelta(minutes=2))
    assert sim.pool.witness("md-a").uuids == (GPU42_UUID,)
    assert sim.pool.witness("md-b").uuids == (gpu_uuid("gpu42", NODE, 1),)
    assert sim.pool.get_deploy("md-a").reservation == ReservationBinding(
        (RSV,), "time_sliced", 1_000
    )


def test_a_three_member_reservation_counts_one_gpu_against_quota(sqlite_url: str) -> None:
    sim = open_sim(
        sqlite_url, shared_pool({"md-a": 30_000, "md-b": 30_000, "md-c": 30_000}, quota=1, gpus=4)
    )
    for d in ("md-a", "md-b", "md-c"):
        sim.start(d)
    status = sim.pool.check_quota("md-c", delta_replicas=1)
    assert (status.used, status.requested, status.quota) == (1, 0, 1)
    assert [d.state.value for d in sim.pool.reservation_deploys(RSV)] == ["STARTING"] * 3
    assert snapshot(sim.pool).gpus[0].holder == RSV  # the one shared GPU, held once
    assert sum(1 for g in snapshot(sim.pool).gpus if g.state == "held") == 1


def test_unbound_work_of_the_project_still_counts_its_gpus(sqlite_url: str) -> None:
    spec = shared_pool({"md-a": 30_000}, quota=1, gpus=4)
    doc = spec.model_dump(mode="json")
    doc["deploys"].append({"id": "md-plain", "project": "vision", "gpus_per_replica": 1})
    sim = open_sim(sqlite_url, load_pool(doc))
    with pytest.raises(QuotaRefused) as err:
        sim.start("md-plain")
    assert (err.value.used, err.value.requested, err.value.quota) == (1, 1, 1)
