from gps_fixtures import T0, uuid_n

from gps_dagster.domain.gps.holders import holder_wanted
from gps_dagster.domain.gps.reservations import Reservation, ReservationState, SharingMode


def test_holder_only_when_no_member_will_run(gpu42: Reservation) -> None:
    assert holder_wanted(gpu42, running=[]) is True
    assert holder_wanted(gpu42, running=["c"]) is False
    assert holder_wanted(gpu42, running=["a", "c"], stopping=["a"]) is False


def test_swap_of_the_last_member_asks_for_the_holder_before_the_stop(gpu42: Reservation) -> None:
    # 18:00 with only A running: the release step of A must first create the holder
    assert holder_wanted(gpu42, running=["a"], stopping=["a"]) is True
    # once B runs again the holder may go
    assert holder_wanted(gpu42, running=["b"]) is False


def test_no_holder_for_exclusive_or_inactive_reservations(gpu42: Reservation) -> None:
    exclusive = Reservation(
        id="r2",
        node="n",
        gpu_uuids=(uuid_n(1),),
        namespace="ns",
        mode=SharingMode.EXCLUSIVE,
        gpu_memory_mib=1,
        created_at=T0,
    )
    assert holder_wanted(exclusive, running=[]) is False
    for state in (ReservationState.DEGRADED, ReservationState.RELEASING, ReservationState.RELEASED):
        assert holder_wanted(gpu42.model_copy(update={"state": state}), running=[]) is False
