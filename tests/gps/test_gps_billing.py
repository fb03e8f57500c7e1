from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from gps_fixtures import T0, uuid_n
from hypothesis import given
from hypothesis import strategies as st

from gps_dagster.domain.gps.billing import QuotaUsage, Workload, billed_seconds, quota_usage, usage
from gps_dagster.domain.gps.reservations import Reservation, ReservationState, SharingMode

A = ReservationState.ACTIVE
D = ReservationState.DEGRADED
R = ReservationState.RELEASING
X = ReservationState.RELEASED
H = timedelta(hours=1)


def test_idle_active_reservation_bills_every_hour(gpu42: Reservation) -> None:
    u = usage(gpu42, [(T0, A)], start=T0, end=T0 + 24 * H)
    assert u.billed_hours == Decimal("24") and u.gpu_hours == Decimal("24")


def test_billing_stops_at_degraded_and_releasing(gpu42: Reservation) -> None:
    history = [(T0, A), (T0 + 2 * H, D), (T0 + 3 * H, A), (T0 + 5 * H, R), (T0 + 6 * H, X)]
    assert usage(gpu42, history, start=T0, end=T0 + 10 * H).billed_hours == Decimal("4")


def test_range_is_half_open_and_clipped(gpu42: Reservation) -> None:
    history = [(T0, A), (T0 + 5 * H, X)]
    assert billed_seconds(history, start=T0 - 3 * H, end=T0 + H) == 3600
    assert billed_seconds(history, start=T0 + 4 * H + timedelta(minutes=30), end=T0 + 9 * H) == 1800
    assert billed_seconds(history, start=T0 + 5 * H, end=T0 + 9 * H) == 0
    assert billed_seconds(history, start=T0 + H, end=T0 + H) == 0


def test_history_order_and_time_zones_do_not_matter() -> None:
    ict = timezone(timedelta(hours=7))
    history = [(T0.astimezone(ict) + 2 * H, X), (T0, A)]
    assert billed_seconds(history, start=T0, end=T0 + 3 * H) == 7200


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        billed_seconds([(T0, A)], start=datetime(2026, 10, 19), end=T0 + H)


def test_gpu_hours_count_the_reservations_gpus() -> None:
    rsv = Reservation(
        id="r2",
        node="n",
        gpu_uuids=tuple(uuid_n(i) for i in range(8)),
        namespace="ns",
        mode=SharingMode.EXCLUSIVE,
        gpu_memory_mib=1,
        created_at=T0,
    )
    u = usage(rsv, [(T0, A)], start=T0, end=T0 + timedelta(minutes=90))
    assert (u.billed_hours, u.gpu_hours) == (Decimal("1.5"), Decimal("12"))


def test_three_member_reservation_counts_one_gpu(gpu42: Reservation) -> None:
    members = [
        Workload("md-a", gpus=1, cpu_millis=4000, memory_mib=65536, reservation=gpu42.id),
        Workload("md-b", gpus=1, cpu_millis=4000, memory_mib=65536, reservation=gpu42.id),
        Workload("md-c", gpus=1, cpu_millis=2000, memory_mib=16384, reservation=gpu42.id),
    ]
    assert quota_usage([gpu42], members) == QuotaUsage(gpus=1, cpu_millis=10000, memory_mib=147456)


def test_unbound_workloads_and_released_reservations(gpu42: Reservation) -> None:
    loose = Workload("md-x", gpus=2, cpu_millis=1000, memory_mib=1024)
    assert quota_usage([gpu42], [loose]) == QuotaUsage(gpus=3, cpu_millis=1000, memory_mib=1024)
    released = gpu42.model_copy(update={"state": X})
    bound = Workload("md-a", gpus=1, cpu_millis=0, memory_mib=0, reservation=gpu42.id)
    assert quota_usage([released], [bound]) == QuotaUsage(gpus=1, cpu_millis=0, memory_mib=0)


states = st.sampled_from(list(ReservationState))


@given(
    steps=st.lists(st.tuples(st.integers(0, 100), states), max_size=8),
    lo=st.integers(-10, 110),
    span=st.integers(0, 120),
)
def test_billed_time_is_bounded_by_the_range_and_additive(
    steps: list[tuple[int, ReservationState]], lo: int, span: int
) -> None:
    history = [(T0 + timedelta(minutes=m), s) for m, s in steps]
    start, end = T0 + timedelta(minutes=lo), T0 + timedelta(minutes=lo + span)
    mid = start + (end - start) / 2
    whole = billed_seconds(history, start=start, end=end)
    assert 0 <= whole <= span * 60
    assert whole == billed_seconds(history, start=start, end=mid) + billed_seconds(
        history, start=mid, end=end
    )


def test_usage_times_may_be_utc_or_offset(gpu42: Reservation) -> None:
    assert usage(gpu42, [(T0, A)], start=T0.astimezone(UTC), end=T0 + H).billed_seconds == 3600
