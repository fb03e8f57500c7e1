import json
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from math import floor

import pytest
from gps_fixtures import EXAMPLE, GPU42_UUID, T0, uuid_n
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.reservations import (
    Reservation,
    ReservationState,
    SharingMode,
    budget_mib,
    format_mib,
    load_reservation_spec,
    parse_reservation_spec,
)
from gps_dagster.domain.pool import gpu_uuid

VALID = {
    "id": "rsv-a",
    "node": "hla-worker-042",
    "gpu_uuids": [GPU42_UUID],
    "namespace": "cmp-vision",
    "mode": "time_sliced",
    "gpu_memory_mib": 143771,
}


def test_h200_budget_is_136582_mib(gpu42: Reservation) -> None:
    assert gpu42.budget_mib == 136582
    assert gpu42.headroom == Decimal("0.95")


def test_example_file_is_the_gpu42_reservation(gpu42: Reservation) -> None:
    assert (gpu42.id, gpu42.node, gpu42.namespace) == (
        "rsv-gpu42-shared",
        "hla-worker-042",
        "cmp-vision",
    )
    assert gpu42.mode is SharingMode.TIME_SLICED
    assert gpu42.state is ReservationState.ACTIVE and gpu42.generation == 1
    # the simulated pool "gpu42" derives the same UUID for GPU 0 of the node
    assert gpu42.gpu_uuids == (gpu_uuid("gpu42", "hla-worker-042", 0),)


@given(mem=st.integers(1, 2_000_000), percent=st.integers(1, 10_000))
def test_budget_is_exact_floor(mem: int, percent: int) -> None:
    headroom = Decimal(percent) / 10_000
    assert budget_mib(mem, headroom) == floor(Fraction(mem) * Fraction(percent, 10_000))


def test_float_headroom_from_yaml_is_exact() -> None:
    # 143771 * 0.95 as binary floats is 136582.44999…; any value just below .0 would be off by one
    spec = load_reservation_spec({**VALID, "gpu_memory_mib": 100, "headroom": 0.29})
    assert spec.budget_mib == 29


def test_default_headroom_applies() -> None:
    assert load_reservation_spec(VALID).headroom == Decimal("0.95")


def test_every_problem_is_reported_with_a_field_path() -> None:
    bad = {
        **VALID,
        "id": "Rsv_A",
        "gpu_uuids": [GPU42_UUID, "nvidia0"],
        "gpu_memory_mib": 0,
        "headroom": 1.5,
        "color": "red",
    }
    with pytest.raises(SpecInvalid) as exc:
        load_reservation_spec(bad, source="r.yaml")
    got = {(e.path, e.reason) for e in exc.value.errors}
    assert got == {
        ("id", "invalid_name"),
        ("gpu_uuids[1]", "invalid_gpu_uuid"),
        ("gpu_memory_mib", "too_small"),
        ("headroom", "invalid_headroom"),
        ("color", "unknown_field"),
    }
    assert exc.value.source == "r.yaml"


@pytest.mark.parametrize("headroom", [0, -0.1, "nan"])
def test_headroom_must_be_a_positive_fraction(headroom: object) -> None:
    with pytest.raises(SpecInvalid) as exc:
        load_reservation_spec({**VALID, "headroom": headroom})
    assert exc.value.errors[0].path == "headroom"


def test_time_sliced_reservation_holds_one_gpu() -> None:
    with pytest.raises(SpecInvalid) as exc:
        load_reservation_spec({**VALID, "gpu_uuids": [uuid_n(1), uuid_n(2)]})
    assert exc.value.reasons == ("time_sliced_multi_gpu",)


def test_exclusive_reservation_may_hold_eight_gpus() -> None:
    spec = load_reservation_spec(
        {**VALID, "mode": "exclusive", "gpu_uuids": [uuid_n(i) for i in range(8)]}
    )
    assert spec.gpu_count == 8


def test_duplicate_uuid_is_refused_case_insensitively() -> None:
    with pytest.raises(SpecInvalid) as exc:
        load_reservation_spec(
            {**VALID, "mode": "exclusive", "gpu_uuids": [uuid_n(1), "GPU-" + uuid_n(1)[4:].upper()]}
        )
    assert [(e.path, e.reason) for e in exc.value.errors] == [
        ("gpu_uuids[1]", "duplicate_gpu_uuid")
    ]


def test_unknown_mode_lists_the_allowed_ones() -> None:
    with pytest.raises(SpecInvalid) as exc:
        load_reservation_spec({**VALID, "mode": "mps"})
    assert exc.value.errors[0].path == "mode"
    assert "exclusive" in exc.value.errors[0].fix and "time_sliced" in exc.value.errors[0].fix


def test_yaml_syntax_error_is_spec_invalid() -> None:
    with pytest.raises(SpecInvalid) as exc:
        parse_reservation_spec("id: [unclosed\n")
    assert exc.value.reasons == ("invalid_yaml",)


def test_json_document_is_accepted() -> None:
    text = json.dumps({**VALID, "gpu_memory_mib": 1000})
    assert text.startswith("{")
    assert parse_reservation_spec(text).budget_mib == 950


def test_reservation_needs_an_aware_creation_time() -> None:
    spec = parse_reservation_spec(EXAMPLE.read_text())
    with pytest.raises(ValidationError):
        Reservation.from_spec(spec, at=datetime(2026, 10, 19, 8, 0))
    assert Reservation.from_spec(spec, at=T0).spec() == spec


def test_reservation_is_frozen(gpu42: Reservation) -> None:
    with pytest.raises(ValidationError):
        gpu42.generation = 2  # type: ignore[misc]


def test_format_mib_groups_thousands() -> None:
    assert format_mib(136582) == "136 582"
    assert format_mib(442) == "442"
