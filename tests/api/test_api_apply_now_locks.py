"""Issue 21 item 3: apply-now's lock is the schedule's, and a refused call spends no rate budget.

Before, the API held one process-wide lock and the engine one pass lock for every schedule:
schedule A's pass made B's apply-now answer ``409 busy``; and the rate bucket was charged
before the lock was tried, so three busy answers left B ``429`` without a pass having run.
"""

from __future__ import annotations

import pytest
from api_support import ADMIN, Api, alpha_schedule, make_api, seed, tenant_base

from gps_dagster.engine import Busy
from gps_dagster.engine.engine import LOCK_NAME

SEED = f"{ADMIN}/gpu-pool-h100-shared:apply-now"
ALPHA = f"{tenant_base('alpha')}/alpha-swap:apply-now"


def _two_schedules(api: Api) -> None:
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    assert api.call("alpha", "POST", tenant_base("alpha"), json=alpha_schedule()).status_code == 201


def test_one_schedules_pass_does_not_make_anothers_apply_now_busy(api: Api) -> None:
    _two_schedules(api)
    with api.services.one_pass("gpu-pool-h100-shared"):  # the seed's apply-now pass, in flight
        other = api.call("alpha", "POST", ALPHA)
        same = api.call("admin", "POST", SEED)
    assert other.status_code == 200, other.text  # was 409 busy
    assert same.status_code == 409 and same.json()["reason"] == "busy"


def test_busy_answers_spend_nothing_of_the_rate_budget(api: Api) -> None:
    _two_schedules(api)
    with api.services.one_pass("gpu-pool-h100-shared"):
        busy = [api.call("admin", "POST", SEED).status_code for _ in range(5)]
    assert busy == [409] * 5  # was 409, 409, 409, then 429 without any pass
    codes = [api.call("admin", "POST", SEED).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_a_busy_store_lock_refunds_the_token(api: Api) -> None:
    from gps_dagster.engine.engine import one_lock_name

    _two_schedules(api)
    store = api.services.store
    with store.lock(
        one_lock_name("gpu-pool-h100-shared"), holder="another-engine", now=api.clock.now()
    ) as held:
        assert held.acquired  # the seed's pass in another engine process
        busy = [api.call("admin", "POST", SEED).status_code for _ in range(4)]
        other = api.call("alpha", "POST", ALPHA)
    assert busy == [409] * 4 and other.status_code == 200
    assert [api.call("admin", "POST", SEED).status_code for _ in range(4)] == [200, 200, 200, 429]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_the_engines_one_schedule_pass_locks_that_schedule_only(
    db: str, request: pytest.FixtureRequest
) -> None:
    from gps_dagster.engine.engine import one_lock_name

    api = make_api(str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")))
    try:
        _two_schedules(api)
        engine, store, now = api.services.engine, api.services.store, api.clock.now()
        with store.lock(
            one_lock_name("alpha/alpha-swap"), holder="another-engine", now=now
        ) as held:
            assert held.acquired
            with pytest.raises(Busy):
                engine.run_pass(schedule="alpha/alpha-swap", trigger="apply_now")
            assert engine.run_pass(schedule="gpu-pool-h100-shared", trigger="apply_now").schedules
        with store.lock(LOCK_NAME, holder="another-engine", now=now) as sweep:  # a sweep: R-PASS-2
            assert sweep.acquired
            with pytest.raises(Busy):
                engine.run_pass(schedule="gpu-pool-h100-shared", trigger="apply_now")
    finally:
        api.client.close()
        api.services.store.engine.dispose()
