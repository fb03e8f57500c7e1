"""Contract: the Core port's reservation surface (SPEC §8).

``admission_preview`` is read-only and agrees with what ``start`` decides;
``witness`` reports the UUIDs of ready replica groups only; a bound deploy
reports its binding and lands on its reservation; ``reservation_deploys``
lists what is bound to a reservation.
"""

from __future__ import annotations

import pytest
from contract_harness import Harness
from contract_pools import reserved

from gps_dagster.domain.pool import gpu_uuid
from gps_dagster.ports import (
    AdmissionRefused,
    DeployState,
    Insufficient,
    NotFound,
    ReservationBinding,
)

RSV_X = {gpu_uuid("reserved", "n1", i) for i in range(4)}


def test_admission_preview_agrees_with_start_and_changes_nothing(harness: Harness) -> None:
    core = harness.load(reserved())
    m1 = core.get_deploy("m1")
    core.start("m1", etag=m1.etag, idempotency_key="m1")
    before = core.get_deploy("m2")
    seen = core.admission_preview("m2", delta_replicas=1)
    assert (seen.admitted, seen.reason, seen.reservation_id) == (
        False,
        "reservation_overcommitted",
        "rsv-ts",
    )
    assert (seen.budget_mib, seen.in_flight_mib, seen.proposed_mib) == (10_000, 6_000, 5_000)
    assert core.get_deploy("m2") == before
    with pytest.raises(AdmissionRefused) as err:
        core.start("m2", etag=before.etag, idempotency_key="m2")
    assert err.value.reason == "reservation_overcommitted"
    assert core.admission_preview("m2", delta_replicas=1, releasing=["m1"]).admitted
    assert core.admission_preview("plain", delta_replicas=1).admitted  # no budget applies
    with pytest.raises(NotFound):
        core.admission_preview("nope", delta_replicas=1)


def test_a_bound_deploy_reports_its_binding_and_is_witnessed_when_ready(harness: Harness) -> None:
    core = harness.load(reserved())
    x = core.get_deploy("x")
    assert x.reservation == ReservationBinding(("rsv-x",), "exclusive")
    assert core.get_deploy("m1").reservation == ReservationBinding(
        ("rsv-ts",), "time_sliced", 6_000
    )
    assert core.get_deploy("plain").reservation is None
    core.start("x", etag=x.etag, idempotency_key="x")
    assert core.witness("x").replicas == ()
    harness.advance(180)
    assert core.get_deploy("x").state is DeployState.READY
    seen = core.witness("x")
    assert len(seen.replicas) == 1 and set(seen.uuids) == RSV_X and seen.source


def test_unbound_work_stays_off_reserved_gpus(harness: Harness) -> None:
    core = harness.load(reserved())
    plain = core.get_deploy("plain")
    core.start("plain", etag=plain.etag, idempotency_key="p")
    harness.advance(180)
    assert set(core.witness("plain").uuids) == {gpu_uuid("reserved", "n1", i) for i in (5, 6, 7)}
    big = core.get_deploy("too-big")  # 4 GPUs would fit only by taking reserved ones
    assert isinstance(core.preview_capacity("too-big", delta_replicas=1), Insufficient)
    core.start("too-big", etag=big.etag, idempotency_key="b")
    harness.advance(180)
    assert core.get_deploy("too-big").unschedulable and core.witness("too-big").replicas == ()


def test_reservation_deploys_lists_the_bound_deploys(harness: Harness) -> None:
    core = harness.load(reserved())
    assert [d.id for d in core.reservation_deploys("rsv-ts")] == ["m1", "m2"]
    assert [d.id for d in core.reservation_deploys("rsv-x")] == ["x"]
    assert core.reservation_deploys("rsv-unknown") == ()
