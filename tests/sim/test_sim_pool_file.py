"""The simulator part of the pool file (``sim:``): timings, foreign workloads, faults."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gps_dagster.backends.sim import SimPool, snapshot
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.pool import load_pool
from gps_dagster.ports import DeployState, Fits, Transient
from gps_dagster.store.db import create_db_engine

T0 = datetime(2026, 10, 19, tzinfo=UTC)


def doc(**sim: Any) -> dict[str, Any]:
    return {
        "name": "p",
        "nodes": [{"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4}],
        "deploys": [
            {"id": "a", "gpus_per_replica": 4},
            {"id": "b", "gpus_per_replica": 2, "state": "running"},
        ],
        "sim": sim,
    }


def test_defaults_are_the_seed_figures() -> None:
    timings = load_pool(doc()).sim.timings
    assert (timings.stop_grace_s, timings.publish_lag_s, timings.start_delay_s) == (30, 60, 120)


def test_faults_and_foreign_workloads_from_the_file_apply(sqlite_url: str) -> None:
    spec = load_pool(
        doc(
            foreign=[{"id": "job", "gpus": 2, "node": "n2"}],
            faults=[
                {"effect": "unschedulable", "deploy": "a"},
                {"effect": "lose_response", "op": "start"},
            ],
            timings={"start_delay_s": 5},
        )
    )
    clock = VirtualClock(T0)
    sim = SimPool.create(create_db_engine(sqlite_url), spec, clock)
    holders = {g.holder for g in snapshot(sim).gpus if g.node == "n2"}
    assert holders == {"job", "b"}  # best fit keeps n1 whole
    assert [f.effect for f in sim.faults()] == ["unschedulable", "lose_response"]
    assert sim.preview_capacity("a", delta_replicas=1) == Fits(groups=1)
    a = sim.get_deploy("a")
    with pytest.raises(Transient):
        sim.start("a", etag=a.etag, idempotency_key="k")
    clock.advance(60)
    view = sim.get_deploy("a")
    assert view.state is DeployState.STARTING and view.unschedulable


@pytest.mark.parametrize(
    ("sim", "path", "reason"),
    [
        (
            {"faults": [{"effect": "never_ready", "deploy": "zz"}]},
            "sim.faults[0]",
            "unknown_deploy",
        ),
        ({"faults": [{"effect": "fail_next"}]}, "sim.faults[0]", "op_required"),
        ({"faults": [{"effect": "never_ready"}]}, "sim.faults[0]", "deploy_required"),
        (
            {"faults": [{"effect": "explode", "op": "start"}]},
            "sim.faults[0].effect",
            "invalid_value",
        ),
        ({"foreign": [{"id": "a", "gpus": 1}]}, "sim.foreign[0].id", "duplicate_holder"),
        (
            {"foreign": [{"id": "j", "gpus": 1, "node": "n9"}]},
            "sim.foreign[0].node",
            "unknown_node",
        ),
        ({"timings": {"publish_lag_s": -1}}, "sim.timings.publish_lag_s", "too_small"),
        ({"bogus": 1}, "sim.bogus", "unknown_field"),
    ],
)
def test_bad_sim_settings_are_precise(sim: dict[str, Any], path: str, reason: str) -> None:
    with pytest.raises(SpecInvalid) as err:
        load_pool(doc(**sim))
    assert (path, reason) in {(e.path, e.reason) for e in err.value.errors}


def test_running_deploys_that_do_not_fit_are_rejected(sqlite_url: str) -> None:
    data = doc()
    data["deploys"][0]["state"] = "running"
    data["deploys"][0]["gpus_per_replica"] = 6
    with pytest.raises(SpecInvalid) as err:
        SimPool.create(create_db_engine(sqlite_url), load_pool(data), VirtualClock(T0))
    assert ("deploys[0].state", "initial_overcommit") in {
        (e.path, e.reason) for e in err.value.errors
    }


def test_node_selector_must_name_a_node() -> None:
    data = doc()
    data["deploys"][1]["node_selector"] = ["n7"]
    with pytest.raises(SpecInvalid) as err:
        load_pool(data)
    assert err.value.reasons == ("unknown_node",)


def test_running_deploys_are_ready_at_load(sqlite_url: str) -> None:
    sim = SimPool.create(create_db_engine(sqlite_url), load_pool(doc()), VirtualClock(T0))
    assert sim.get_deploy("b").state is DeployState.READY
