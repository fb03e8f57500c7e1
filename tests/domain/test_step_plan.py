"""``StepPlan``: the planner's keys of a step's ``detail``, read and written in one place.

The dict ``as_detail`` gives is compared with the literal the planner wrote before the record
existed (rows already stored must read the same, the golden replay must not move); reading
tolerates rows written before a key existed and values of the wrong type.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from gps_dagster.domain.step_plan import RETRY_SINCE, UNSCHEDULABLE_SINCE, StepPlan, instant

END = datetime(2026, 12, 1, 18, 0, tzinfo=timezone(timedelta(hours=1)))

COMBINATIONS = list(
    itertools.product(
        (False, True),  # persist_replicas
        (False, True),  # allow_downtime
        (None, END),  # interval_end
        (False, True),  # endpoint
        (None, "3f2c-uid"),  # instance
        (None, 0.0, 300.0),  # unschedulable_grace_s
    )
)


def _as_written(
    persist: bool, allow: bool, end: datetime | None, endpoint: bool, instance: Any, grace: Any
) -> dict[str, Any]:
    """The planner's ``detail`` literal, as it was written before ``StepPlan``."""
    return {
        "persist_replicas": persist,
        "allow_downtime": allow,
        "interval_end": end.isoformat() if end else None,
        "endpoint": endpoint,
        "instance": instance,
        "unschedulable_grace_s": grace,
    }


@pytest.mark.parametrize("values", COMBINATIONS)
def test_as_detail_is_the_planners_dict_and_reads_back(values: tuple[Any, ...]) -> None:
    persist, allow, end, endpoint, instance, grace = values
    plan = StepPlan(
        persist_replicas=persist,
        allow_downtime=allow,
        interval_end=end,
        endpoint=endpoint,
        instance=instance,
        unschedulable_grace_s=grace,
    )
    written = _as_written(*values)
    assert plan.as_detail() == written
    assert list(plan.as_detail()) == list(written)  # the stored JSON text keeps its key order
    assert json.dumps(plan.as_detail()) == json.dumps(written)
    assert StepPlan.of(written) == plan
    assert StepPlan.of(json.loads(json.dumps(written))) == plan  # through a JSON column


def test_bookkeeping_keys_beside_the_plan_are_not_part_of_it() -> None:
    written = _as_written(True, True, END, False, "uid", 60.0)
    detail = {
        **written,
        RETRY_SINCE: END.isoformat(),
        UNSCHEDULABLE_SINCE: END.isoformat(),
        "phase": "stop_timeout",
        "culprit": "a-1",
        "free_by_node": {"n1": 2},
    }
    assert StepPlan.of(detail) == StepPlan.of(written)
    assert StepPlan.of(detail).as_detail() == written


@pytest.mark.parametrize("detail", [None, {}, [], "text"])
def test_a_row_without_a_plan_reads_as_the_defaults(detail: Any) -> None:
    plan = StepPlan.of(detail)
    assert plan == StepPlan()
    assert (plan.persist_replicas, plan.allow_downtime, plan.endpoint) == (False, False, False)
    assert (plan.interval_end, plan.instance, plan.unschedulable_grace_s) == (None, None, None)


def test_an_old_row_with_the_first_three_keys_keeps_them() -> None:
    old = {"persist_replicas": True, "allow_downtime": True, "interval_end": END.isoformat()}
    assert StepPlan.of(old) == StepPlan(
        persist_replicas=True, allow_downtime=True, interval_end=END
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("persist_replicas", "yes"),
        ("persist_replicas", 1),
        ("allow_downtime", "true"),
        ("allow_downtime", None),
        ("endpoint", "md-llama70b"),
        ("endpoint", 1),
        ("interval_end", 42),
        ("interval_end", "not a date"),
        ("interval_end", "2026-12-01T18:00:00"),  # naive: not an instant
        ("instance", 7),
        ("instance", ["uid"]),
        ("unschedulable_grace_s", "300"),
        ("unschedulable_grace_s", True),
        ("unschedulable_grace_s", float("nan")),
        ("unschedulable_grace_s", float("inf")),
        ("unschedulable_grace_s", [300]),
    ],
)
def test_a_value_of_the_wrong_type_reads_as_the_default(key: str, value: Any) -> None:
    assert StepPlan.of({key: value}) == StepPlan()
    good = _as_written(True, True, END, True, "uid", 30.0)
    plan = StepPlan.of({**good, key: value})
    assert getattr(plan, key) == getattr(StepPlan(), key)
    others = {k: v for k, v in plan.as_detail().items() if k != key}
    assert others == {k: v for k, v in good.items() if k != key}


def test_a_whole_number_of_seconds_reads_as_seconds() -> None:
    assert StepPlan.of({"unschedulable_grace_s": 300}).unschedulable_grace_s == 300.0


def test_instant_reads_aware_iso_text_only() -> None:
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    assert instant({RETRY_SINCE: at.isoformat()}, RETRY_SINCE) == at
    assert instant({RETRY_SINCE: at.isoformat()}, UNSCHEDULABLE_SINCE) is None
    assert instant(None, RETRY_SINCE) is None
    assert instant({RETRY_SINCE: "2026-12-01T09:30:00"}, RETRY_SINCE) is None
    assert instant({RETRY_SINCE: "yesterday"}, RETRY_SINCE) is None
    assert instant({RETRY_SINCE: 1733045400}, RETRY_SINCE) is None
