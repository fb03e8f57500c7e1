"""Pool-file additions for GPS: ``reservations:`` and a deploy's ``reservation:`` binding."""

from __future__ import annotations

from typing import Any

import pytest
from gps_sim import RSV, example_pool, gpu42_reservation_doc

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.pool import load_pool


def _pool(**deploy: Any) -> dict[str, Any]:
    return {
        "name": "gpu42",
        "nodes": [{"name": "hla-worker-042", "gpus": 8, "gpu_memory_mib": 143771}],
        "reservations": [gpu42_reservation_doc()],
        "deploys": [{"id": "m", "gpus_per_replica": 1, **deploy}],
    }


def _reasons(doc: dict[str, Any]) -> set[tuple[str, str]]:
    with pytest.raises(SpecInvalid) as err:
        load_pool(doc)
    return {(e.path, e.reason) for e in err.value.errors}


def test_the_examples_parse_into_bindings() -> None:
    gpu42 = load_pool(example_pool("gpu42-pool.yaml"))
    assert [r.id for r in gpu42.reservations] == [RSV]
    assert {d.id: d.binding() for d in gpu42.deploys}["md-vision-embed"] == TimeSlicedBinding(
        reservation=RSV, memory_mib=24_000
    )
    s2 = load_pool(example_pool("scenario2-reservations-pool.yaml"))
    assert s2.deploy("md-qwen-8gpu").binding() == ExclusiveBinding(
        gpus_per_replica=8, reservations=("rsv-r2",)
    )  # type: ignore[union-attr]


def test_a_member_over_the_whole_budget_is_refused_with_its_path() -> None:
    doc = _pool(reservation={"mode": "time_sliced", "reservation": RSV, "memory_mib": 136_583})
    assert ("deploys[0].reservation.memory_mib", "memory_over_budget") in _reasons(doc)


def test_a_time_sliced_member_is_one_replica_on_one_gpu() -> None:
    doc = _pool(
        reservation={"mode": "time_sliced", "reservation": RSV, "memory_mib": 1000}, replicas=2
    )
    assert ("deploys[0].reservation", "time_sliced_single_gpu") in _reasons(doc)


def test_binding_in_the_wrong_mode_is_refused() -> None:
    doc = _pool(reservation={"mode": "exclusive", "reservations": [RSV]})
    assert ("deploys[0].reservation.reservations[0]", "reservation_mode_mismatch") in _reasons(doc)


def test_reserved_gpus_must_be_gpus_of_the_node() -> None:
    doc = _pool()
    doc["reservations"][0]["gpu_uuids"] = ["GPU-00000000-0000-4000-8000-000000000001"]
    assert ("reservations[0].gpu_uuids[0]", "gpu_not_on_node") in _reasons(doc)
    doc = _pool()
    doc["reservations"][0]["node"] = "elsewhere"
    assert ("reservations[0].node", "unknown_node") in _reasons(doc)


def test_misplace_is_a_fault_that_names_a_deploy() -> None:
    doc = _pool()
    doc["sim"] = {"faults": [{"effect": "misplace"}]}
    assert ("sim.faults[0]", "deploy_required") in _reasons(doc)
