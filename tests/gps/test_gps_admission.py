import pytest
from gps_fixtures import T0, gpu42_reservation, uuid_n
from hypothesis import given
from hypothesis import strategies as st

from gps_dagster.domain.gps.admission import (
    MODE_MISMATCH,
    NOT_ACTIVE,
    OVERCOMMITTED,
    Admitted,
    Ineligible,
    Overcommitted,
    admit,
)
from gps_dagster.domain.gps.reservations import Reservation, ReservationState, SharingMode

BUDGET = 136582
GPU42 = gpu42_reservation()


def test_exactly_at_budget_is_admitted(gpu42: Reservation) -> None:
    got = admit(
        gpu42, running={"a": 100_000}, in_flight={"c": 20_000}, proposed=("b", BUDGET - 120_000)
    )
    assert got == Admitted("rsv-gpu42-shared", 1, BUDGET, BUDGET)
    assert got.free_mib == 0


def test_one_mib_over_budget_is_overcommitted(gpu42: Reservation) -> None:
    got = admit(
        gpu42, running={"a": 100_000}, in_flight={"c": 20_000}, proposed=("b", BUDGET - 120_000 + 1)
    )
    assert isinstance(got, Overcommitted)
    assert got.reason == OVERCOMMITTED == "reservation_overcommitted"
    assert got.over_by_mib == 1


def test_single_member_of_the_whole_budget(gpu42: Reservation) -> None:
    assert isinstance(admit(gpu42, running={}, in_flight={}, proposed=("a", BUDGET)), Admitted)
    assert isinstance(
        admit(gpu42, running={}, in_flight={}, proposed=("a", BUDGET + 1)), Overcommitted
    )


def test_fix_text_carries_the_numbers(gpu42: Reservation) -> None:
    got = admit(
        gpu42, running={"a": 80_000, "c": 40_000}, in_flight={"d": 16_000}, proposed=("b", 1024)
    )
    assert isinstance(got, Overcommitted)
    assert got.fix == (
        "136 582 MiB budget, 120 000 MiB running, 16 000 MiB in flight, proposed 1 024 MiB: "
        "over by 442 MiB; lower memory_mib or stop a member"
    )


def test_in_flight_actions_are_counted(gpu42: Reservation) -> None:
    assert isinstance(admit(gpu42, running={}, in_flight={}, proposed=("b", 80_000)), Admitted)
    assert isinstance(
        admit(gpu42, running={}, in_flight={"a": 60_000}, proposed=("b", 80_000)), Overcommitted
    )


def test_a_resubmission_is_not_counted_twice(gpu42: Reservation) -> None:
    # b's own start is in flight (lost response); re-proposing it must not double it
    got = admit(gpu42, running={"a": 60_000}, in_flight={"b": 70_000}, proposed=("b", 70_000))
    assert got == Admitted("rsv-gpu42-shared", 1, BUDGET, 130_000)


def test_a_running_member_changing_memory_is_counted_at_the_new_figure(gpu42: Reservation) -> None:
    got = admit(gpu42, running={"a": 60_000, "b": 10_000}, in_flight={}, proposed=("b", 76_583))
    assert isinstance(got, Overcommitted) and got.running_mib == 60_000 and got.over_by_mib == 1


def test_member_both_running_and_in_flight_counts_once_at_the_in_flight_figure(
    gpu42: Reservation,
) -> None:
    got = admit(gpu42, running={"a": 50_000}, in_flight={"a": 60_000}, proposed=("b", 76_582))
    assert got == Admitted("rsv-gpu42-shared", 1, BUDGET, BUDGET)


@pytest.mark.parametrize(
    "state", [ReservationState.DEGRADED, ReservationState.RELEASING, ReservationState.RELEASED]
)
def test_only_active_reservations_admit(gpu42: Reservation, state: ReservationState) -> None:
    got = admit(
        gpu42.model_copy(update={"state": state}), running={}, in_flight={}, proposed=("b", 1)
    )
    assert isinstance(got, Ineligible) and got.reason == NOT_ACTIVE


def test_exclusive_reservations_have_no_vram_admission() -> None:
    rsv = Reservation(
        id="r2",
        node="n",
        gpu_uuids=tuple(uuid_n(i) for i in range(8)),
        namespace="ns",
        mode=SharingMode.EXCLUSIVE,
        gpu_memory_mib=143771,
        created_at=T0,
    )
    got = admit(rsv, running={}, in_flight={}, proposed=("b", 1))
    assert isinstance(got, Ineligible) and got.reason == MODE_MISMATCH


members = st.dictionaries(st.sampled_from("acdefg"), st.integers(1, 80_000), max_size=4)


@given(running=members, in_flight=members, proposed=st.integers(1, 140_000))
def test_admitted_iff_the_sum_fits(
    running: dict[str, int], in_flight: dict[str, int], proposed: int
) -> None:
    counted = {**running, **in_flight, "b": proposed}
    got = admit(GPU42, running=running, in_flight=in_flight, proposed=("b", proposed))
    assert isinstance(got, Admitted) == (sum(counted.values()) <= BUDGET)
    if isinstance(got, Overcommitted):
        assert got.running_mib + got.in_flight_mib + got.proposed_mib == sum(counted.values())
        assert got.over_by_mib > 0
