"""The engine's decisions on ``FakeCore`` (no simulator): release-first order, the capacity
wait, the alias guard, the stop timeout.

The same engine and store (SQLite in a tmp dir) as ``test_warnings.py``, on the in-memory core
of ``gps_dagster.testing``: a case runs in milliseconds of core time instead of the simulator's
database round trips. Each asserts the decision's outcome *and* that the core saw only the
mutations that decision allows (``FakeCore.ops``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import AliasGuardUnavailable, DeployState, OperationKind
from gps_dagster.store import Store
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.testing import CoreCall, FakeCore, Handler, passthrough
from tests.engine.harness import A, B, a_running_pool, local, seed_schedule

EVENING = local("2026-10-19T17:59:30")  # A serving, 30 s before the 18:00 swap (A stops, B starts)


@dataclass
class FakeWorld:
    clock: VirtualClock
    store: Store
    core: FakeCore
    engine: Engine
    spec: Schedule

    def run_until(self, until: datetime, *, every: float = 30) -> None:
        while self.clock.now() < until:
            self.engine.run_pass()
            self.clock.advance(every)

    def status(self, target: str) -> TargetStatusRow:
        row = self.store.get_status(self.spec.name, target)
        assert row is not None, f"no status for {target}"
        return row

    def ops(self) -> list[tuple[str, str, datetime]]:
        return [(o.deploy, o.kind.value, o.created_at) for o in self.core.ops]


def fake_world(
    url: str,
    *,
    pool: dict[str, Any] | None = None,
    schedule: dict[str, Any] | None = None,
    config: EngineConfig | None = None,
    handler: Handler = passthrough,
) -> FakeWorld:
    clock = VirtualClock(EVENING)
    store = Store.open(url)
    spec = load_pool(copy.deepcopy(pool or a_running_pool()))
    core = FakeCore(spec, clock, timings=spec.sim.timings, handler=handler)
    schedule_spec = load_schedule(copy.deepcopy(schedule or seed_schedule()))
    store.apply_schedule(schedule_spec, now=EVENING)
    store.set_gate("enforce", now=EVENING)
    engine = Engine(store, core, clock, config or EngineConfig(), database_clock=clock)
    return FakeWorld(clock, store, core, engine, schedule_spec)


def test_release_first_starts_b_only_once_a_s_gpus_are_published(sqlite_url: str) -> None:
    w = fake_world(sqlite_url)
    w.run_until(local("2026-10-19T18:05"))
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"
    assert w.core.get_deploy(A).state is DeployState.STOPPED
    assert w.core.get_deploy(B).state is DeployState.READY
    # A's stop at 18:00; its pods gone at 18:00:30, its GPUs published at 18:01:30: B starts then.
    assert w.ops() == [
        (A, "stop", local("2026-10-19T18:00")),
        (B, "start", local("2026-10-19T18:01:30")),
    ]


def test_capacity_taken_by_an_intruder_ends_capacity_unavailable_after_the_wait(
    sqlite_url: str,
) -> None:
    w = fake_world(sqlite_url, config=EngineConfig(capacity_wait_s=300))
    w.core.add_foreign("intruder", 8, kind="intruder")
    w.run_until(local("2026-10-19T18:05"))  # last pass at 18:04:30
    assert w.status(B).phase == "capacity_wait"
    w.run_until(
        local("2026-10-19T18:05:30")
    )  # the pass at 18:05:00 = nominal start + capacity_wait_s
    st = w.status(B)
    assert (st.phase, st.reason, st.phase_since) == (
        "capacity_unavailable",
        "capacity_unavailable",
        local("2026-10-19T18:05"),
    )
    assert w.core.get_deploy(B).state is DeployState.STOPPED
    assert w.core.get_deploy(A).state is DeployState.STOPPED  # the released target is not restarted
    assert [(d, k) for d, k, _ in w.ops()] == [(A, "stop")]


def test_alias_without_consent_blocks_the_plan_and_mutates_nothing(sqlite_url: str) -> None:
    doc = seed_schedule()
    doc["targets"][0]["default_allow_downtime"] = False  # 18:00 stops A without consent
    w = fake_world(sqlite_url, schedule=doc)
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("alias_blocked", "alias_without_consent")
    assert "chat-prod" in (st.fix or "")
    assert w.status(B).phase == "alias_blocked"
    assert w.core.get_deploy(A).state is DeployState.READY and w.ops() == []


def guard(reason: str) -> Handler:
    """A handler whose alias guard for A is unavailable; every other call goes through."""

    def handle(call: CoreCall, proceed: Callable[[], object]) -> object:
        if call.method == "alias_guard" and call.deploy_id == A:
            raise AliasGuardUnavailable(reason)
        return proceed()

    return handle


def test_an_unreadable_alias_guard_fails_closed(sqlite_url: str) -> None:
    w = fake_world(sqlite_url, handler=guard("read_error"))  # the schedule consents
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("alias_blocked", "alias_guard_read_error")
    assert w.core.get_deploy(A).state is DeployState.READY and w.ops() == []


def test_stop_timeout_when_pods_terminate_too_long_and_b_is_not_started(sqlite_url: str) -> None:
    pool = a_running_pool()
    pool["sim"]["timings"]["stop_grace_s"] = 900
    w = fake_world(sqlite_url, pool=pool, config=EngineConfig(stop_timeout_s=120))
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(A)
    assert (st.phase, st.reason, st.phase_since) == (
        "stop_timeout",
        "stop_timeout",
        local("2026-10-19T18:02"),
    )
    assert w.status(B).reason == "stop_timeout"
    assert w.core.get_deploy(B).state is DeployState.STOPPED
    assert [(d, k) for d, k, _ in w.ops()] == [(A, OperationKind.STOP.value)]
