import pytest
from gps_fixtures import T0, uuid_n

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.bindings import (
    ExclusiveBinding,
    TimeSlicedBinding,
    binding_errors,
    load_binding,
)
from gps_dagster.domain.gps.reservations import Reservation, ReservationState, SharingMode


def _exclusive(rid: str, gpus: int, first: int) -> Reservation:
    return Reservation(
        id=rid,
        node=f"node-{rid}",
        gpu_uuids=tuple(uuid_n(first + i) for i in range(gpus)),
        namespace="ns",
        mode=SharingMode.EXCLUSIVE,
        gpu_memory_mib=81559,
        created_at=T0,
    )


@pytest.fixture
def ledger(gpu42: Reservation) -> dict[str, Reservation]:
    return {
        "r1": _exclusive("r1", 8, 0),
        "r2": _exclusive("r2", 8, 8),
        "r4": _exclusive("r4", 4, 16),
        gpu42.id: gpu42,
    }


def test_loads_both_shapes() -> None:
    assert load_binding(
        {"mode": "exclusive", "gpus_per_replica": 8, "reservations": ["r1", "r2"]}
    ) == ExclusiveBinding(gpus_per_replica=8, reservations=("r1", "r2"))
    assert load_binding(
        {"mode": "time_sliced", "reservation": "rsv-gpu42-shared", "memory_mib": 40000}
    ) == TimeSlicedBinding(reservation="rsv-gpu42-shared", memory_mib=40000)


def test_bad_binding_reports_paths() -> None:
    with pytest.raises(SpecInvalid) as exc:
        load_binding({"mode": "time_sliced", "reservation": "x", "memory_mib": 0})
    assert [(e.path, e.reason) for e in exc.value.errors] == [("binding.memory_mib", "too_small")]
    with pytest.raises(SpecInvalid) as exc:
        load_binding({"mode": "mps"})
    assert exc.value.errors[0].path == "binding"


def test_scenario_2_bindings_are_valid(ledger: dict[str, Reservation]) -> None:
    assert (
        binding_errors(ExclusiveBinding(gpus_per_replica=8, reservations=("r1", "r2")), ledger)
        == []
    )
    assert binding_errors(ExclusiveBinding(gpus_per_replica=8, reservations=("r2",)), ledger) == []


def test_exclusive_binding_problems(ledger: dict[str, Reservation]) -> None:
    b = ExclusiveBinding(
        gpus_per_replica=8, reservations=("r4", "nope", "rsv-gpu42-shared", "r1", "r1")
    )
    got = [(e.path, e.reason) for e in binding_errors(b, ledger)]
    assert got == [
        ("binding.reservations[0]", "replica_does_not_fit"),
        ("binding.reservations[1]", "unknown_reservation"),
        ("binding.reservations[2]", "reservation_mode_mismatch"),
        ("binding.reservations[4]", "duplicate_reservation"),
    ]


def test_time_sliced_member_within_and_over_the_whole_budget(
    ledger: dict[str, Reservation],
) -> None:
    assert (
        binding_errors(TimeSlicedBinding(reservation="rsv-gpu42-shared", memory_mib=136582), ledger)
        == []
    )
    got = binding_errors(
        TimeSlicedBinding(reservation="rsv-gpu42-shared", memory_mib=136583), ledger
    )
    assert [(e.path, e.reason) for e in got] == [("binding.memory_mib", "memory_over_budget")]
    assert "136 582 MiB" in got[0].fix


def test_binding_to_a_released_reservation_is_refused(ledger: dict[str, Reservation]) -> None:
    ledger["rsv-gpu42-shared"] = ledger["rsv-gpu42-shared"].model_copy(
        update={"state": ReservationState.RELEASED}
    )
    got = binding_errors(TimeSlicedBinding(reservation="rsv-gpu42-shared", memory_mib=1), ledger)
    assert [e.reason for e in got] == ["reservation_not_active"]
    got = binding_errors(TimeSlicedBinding(reservation="r1", memory_mib=1), ledger)
    assert [e.reason for e in got] == ["reservation_mode_mismatch"]
