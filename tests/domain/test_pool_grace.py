"""The pool's unschedulable grace (issue 18 item 10): an optional, bounded schedule field."""

from __future__ import annotations

from typing import Any

import pytest

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.schedules import load_schedule
from tests.engine.harness import seed_schedule


def test_absent_it_is_none_and_the_document_is_unchanged() -> None:
    doc = seed_schedule()
    spec = load_schedule(doc)
    assert spec.unschedulable_grace_s is None
    assert "unschedulable_grace_s" not in spec.to_document()


def test_set_it_round_trips_through_the_document() -> None:
    doc = {**seed_schedule(), "unschedulable_grace_s": 900}
    spec = load_schedule(doc)
    assert spec.unschedulable_grace_s == 900.0
    assert load_schedule(spec.to_document()) == spec


@pytest.mark.parametrize("value", ["900", True, -1, 86_401])
def test_a_wrong_value_is_refused_with_its_field(value: Any) -> None:
    with pytest.raises(SpecInvalid) as err:
        load_schedule({**seed_schedule(), "unschedulable_grace_s": value})
    (error,) = err.value.errors
    assert error.path == "unschedulable_grace_s" and error.fix
