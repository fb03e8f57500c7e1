"""The one owner of step exceptions, ``failures.judge``, and the step clocks (SPEC R-PASS-15).

Every error class a core adapter raises is mapped (permanent ones to a terminal
phase with a fix, temporary and unknown ones to a retry bounded by the step's
clock, with the look-ahead); the behaviour through whole passes is in
``test_exception_owner.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from gps_dagster.domain.errors import TemporaryError
from gps_dagster.domain.phases import Phase
from gps_dagster.engine import EngineConfig
from gps_dagster.engine.failures import End, Retry, StepClock, clock_of, judge
from gps_dagster.ports import (
    AdmissionRefused,
    AliasGuardUnavailable,
    BillingRefused,
    CoreError,
    EtagMismatch,
    NotFound,
    Permanent,
    QuotaRefused,
    Transient,
    Unsupported,
)
from gps_dagster.store.errors import ScheduleNotFound, StoreUnavailable
from tests.engine.harness import World, a_running_pool, local, make_world

EVENING = local("2026-10-19T17:59:30")


def _step(w: World, state: str = "pending") -> Any:
    w.tick(30)
    (plan,) = w.engine.reconcile().plans
    a = w.store.get_action(plan.release_steps[0].step_id)
    return replace(a, state=state)  # type: ignore[type-var]


PERMANENT: list[tuple[CoreError, Phase, str]] = [
    (NotFound("gone"), Phase.INELIGIBLE, "target_failed"),
    (
        QuotaRefused("over", project="p", quota=1, used=1, requested=1),
        Phase.QUOTA_REFUSED,
        "quota_refused",
    ),
    (BillingRefused("unpaid", project="p"), Phase.BILLING_REFUSED, "billing_refused"),
    (AliasGuardUnavailable("unwired"), Phase.ALIAS_BLOCKED, "alias_guard_unwired"),
    (
        AdmissionRefused("reservation_overcommitted"),
        Phase.RESERVATION_OVERCOMMITTED,
        "reservation_overcommitted",
    ),
    (AdmissionRefused("alias_requires_consent"), Phase.ALIAS_BLOCKED, "alias_requires_consent"),
    (AdmissionRefused("flavor_quota"), Phase.QUOTA_REFUSED, "flavor_quota"),
    (Unsupported("hpa"), Phase.INELIGIBLE, "unsupported_scale_for_mode"),
    (EtagMismatch("changed"), Phase.INELIGIBLE, "core_refused"),
    (Permanent("no"), Phase.INELIGIBLE, "core_refused"),
]


@pytest.mark.parametrize(
    ("exc", "phase", "reason"),
    PERMANENT,
    ids=[type(e).__name__ + str(i) for i, (e, _, _) in enumerate(PERMANENT)],
)
def test_r_pass_15_every_permanent_core_error_is_a_terminal_phase_with_a_fix(
    sqlite_url: str, exc: CoreError, phase: Phase, reason: str
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    a = _step(w)
    clock = StepClock(w.clock.now() + timedelta(hours=1), Phase.STOP_TIMEOUT)
    out = judge(exc, step=a, now=w.clock.now(), clock=clock, retry_in_s=30)
    assert isinstance(out, End)
    assert (out.verdict.phase, out.verdict.reason) == (phase, reason)
    assert out.verdict.fix


@pytest.mark.parametrize(
    ("exc", "reason", "write"),
    [
        (Transient("timeout"), "core_unreadable", True),
        (TemporaryError("lag"), "temporary_error", True),
        (
            StoreUnavailable("OperationalError: server closed the connection"),
            "store_unavailable",
            False,
        ),
        (RuntimeError("bug"), "engine_error", True),
        (OSError("reset"), "engine_error", True),
    ],
)
def test_r_pass_15_temporary_and_unknown_errors_retry_until_the_step_clock_then_end(
    sqlite_url: str, exc: Exception, reason: str, write: bool
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    a = _step(w)
    now = w.clock.now()
    clock = StepClock(now + timedelta(seconds=300), Phase.STOP_TIMEOUT)
    out = judge(exc, step=a, now=now, clock=clock, retry_in_s=30)
    assert isinstance(out, Retry) and (out.reason, out.write, out.deadline) == (
        reason,
        write,
        clock.deadline,
    )
    if not write:
        return  # the store is down: nothing can be written, the step is judged when it is back
    # look-ahead: a retry that would only happen past the deadline ends the step now
    ahead = judge(exc, step=a, now=now + timedelta(seconds=271), clock=clock, retry_in_s=30)
    assert isinstance(ahead, End) and (ahead.verdict.phase, ahead.verdict.reason) == (
        Phase.STOP_TIMEOUT,
        reason,
    )
    assert isinstance(
        judge(exc, step=a, now=now + timedelta(seconds=270), clock=clock, retry_in_s=30), Retry
    )


def test_r_pass_15_a_store_error_in_a_step_is_terminal_with_its_own_fix(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    a = _step(w)
    out = judge(
        ScheduleNotFound("gone"),
        step=a,
        now=w.clock.now(),
        clock=StepClock(w.clock.now() + timedelta(hours=1), Phase.STOP_TIMEOUT),
        retry_in_s=30,
    )
    assert isinstance(out, End) and out.verdict.reason == "schedule_not_found"
    assert "schedules list" in out.verdict.fix


def test_r_pass_15_each_step_state_has_its_own_clock(sqlite_url: str) -> None:
    cfg = EngineConfig(stop_timeout_s=600, readiness_timeout_s=1800, capacity_wait_s=900)
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING, config=cfg)
    w.tick(30)
    (plan,) = w.engine.reconcile().plans
    now = w.clock.now()
    release = w.store.get_action(plan.release_steps[0].step_id)
    acquire = w.store.get_action(plan.acquire_steps[0].step_id)
    assert release is not None and acquire is not None

    assert clock_of(release, cfg, now=now, opened_at=now) == StepClock(
        now + timedelta(seconds=600), Phase.STOP_TIMEOUT
    )
    since = now - timedelta(seconds=100)
    retried = replace(release, detail={**(release.detail or {}), "retry_since": since.isoformat()})
    assert clock_of(retried, cfg, now=now, opened_at=now).deadline == since + timedelta(seconds=600)
    assert clock_of(acquire, cfg, now=now, opened_at=now) == StepClock(
        local("2026-10-19T18:15"), Phase.CAPACITY_UNAVAILABLE
    )
    submitted = replace(acquire, state="submitting", submitted_at=since)
    assert clock_of(submitted, cfg, now=now, opened_at=now) == StepClock(
        since + timedelta(seconds=1800), Phase.READINESS_TIMEOUT
    )
    accepted = replace(
        release, state="accepted", submitted_at=since, deadline_at=now + timedelta(seconds=5)
    )
    assert clock_of(accepted, cfg, now=now, opened_at=now) == StepClock(
        now + timedelta(seconds=5), Phase.STOP_TIMEOUT
    )
