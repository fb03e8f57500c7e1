"""The pure step rules (``domain/step_rules.py``), one table each: every lane calls them, so a
wrong row here is a wrong decision in every lane at once (the lane-equality table in
``tests/engine/test_step_table.py`` cannot see that)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gps_dagster.domain import step_rules

T0 = datetime(2026, 10, 20, 18, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("fits", "now", "state", "expected"),
    [
        (True, T0, "pending", "fits"),
        (True, T0 + timedelta(hours=1), "capacity_wait", "fits"),  # a fit past the deadline goes
        (False, T0 - timedelta(seconds=1), "pending", "enter"),
        (False, T0 - timedelta(seconds=1), "capacity_wait", "wait"),
        (False, T0, "pending", "timeout"),  # the deadline itself ends the wait
        (False, T0 + timedelta(seconds=1), "capacity_wait", "timeout"),
    ],
)
def test_capacity_call(fits: bool, now: datetime, state: str, expected: str) -> None:
    assert step_rules.capacity_call(fits=fits, now=now, deadline=T0, state=state) == expected


@pytest.mark.parametrize(
    ("refused", "expected"),
    [
        ({}, None),
        ({"b": 1}, "b"),
        ({"c": 1, "b": 2}, "b"),  # the first by name, whatever preflight's order
        ({"r": 1}, None),  # the release's own deploy never stops itself
        ({"x": 1}, None),  # not an unsubmitted acquire of the plan
        ({"x": 1, "r": 1, "c": 1}, "c"),
    ],
)
def test_recheck_culprit(refused: dict[str, int], expected: str | None) -> None:
    assert step_rules.recheck_culprit("r", {"b", "c", "r"}, refused) == expected


def test_recheck_text_names_the_culprit_the_release_and_the_fix() -> None:
    text = step_rules.recheck_text("a", "b", "quota_refused", "raise the quota")
    assert text == (
        "b failed preflight (quota_refused) when the release was due; a left as it is — "
        "raise the quota"
    )


@pytest.mark.parametrize(
    ("refusal", "expected"),
    [
        (None, "submit"),
        ("gate_not_enforce", "stay"),
        ("lost_race", "stay"),
        ("schedule_version_changed", "superseded"),
        ("schedule_deleted", "superseded"),
        ("schedule_disabled", "superseded"),
        ("claim_lost", "superseded"),
        ("fenced_out", "superseded"),
    ],
)
def test_fence_outcome(refusal: str | None, expected: str) -> None:
    assert step_rules.fence_outcome(refusal) == expected


@pytest.mark.parametrize(
    ("order", "first", "before", "verdict", "index"),
    [
        ("release", "release", ["pending"], "go", None),
        ("acquire", "release", ["accepted", "superseded"], "go", None),
        ("acquire", "release", ["accepted", "submitting"], "wait", None),
        ("release", "acquire", ["accepted"], "wait", None),  # acquire-first waits for done
        ("release", "acquire", ["converged"], "go", None),
        ("acquire", "release", ["accepted", "cancelled", "failed"], "broken", 1),
    ],
)
def test_may_move(
    order: str, first: str, before: list[str], verdict: str, index: int | None
) -> None:
    expected = step_rules.Move(verdict, index)  # type: ignore[arg-type]
    assert step_rules.may_move(order, first, before) == expected
