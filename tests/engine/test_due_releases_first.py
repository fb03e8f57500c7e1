"""A boundary served in several due batches submits every batch's releases before any acquire is
previewed.

At 1,000 swaps on one boundary the due path claims 20 batches of 50; each batch used to submit
its releases and then preview its acquires (core sessions, quota and capacity arithmetic) before
the next batch was claimed, so the last batch's releases waited for nineteen batches of
previews: on the Kubernetes storm, releases took 5.5x a plain client. Now the batches' first
halves go first and the pass then moves the second halves of all of them at once.
"""

from __future__ import annotations

from collections.abc import Callable

from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import DeployState
from gps_dagster.store import Store
from gps_dagster.testing import CoreCall, FakeCore
from tests.engine.harness import local
from tests.engine.night_fleet import night_pool, night_schedule

N = 3
BEFORE = local("2026-10-19T21:59:30")


def _world(url: str, calls: list[tuple[str, str | None]]) -> tuple[VirtualClock, FakeCore, Engine]:
    def record(call: CoreCall, proceed: Callable[[], object]) -> object:
        if call.method in ("stop", "start", "preview_capacity"):
            calls.append((call.method, call.deploy_id))
        return proceed()

    clock = VirtualClock(BEFORE)
    store = Store.open(url)
    spec = load_pool(night_pool(N))
    core = FakeCore(spec, clock, timings=spec.sim.timings, handler=record)
    for i in range(N):
        store.apply_schedule(load_schedule(night_schedule(i)), now=BEFORE)
    store.set_gate("enforce", now=BEFORE)
    engine = Engine(store, core, clock, EngineConfig(due_batch=1), database_clock=clock)
    return clock, core, engine


def test_every_due_batchs_release_is_submitted_before_any_acquire_is_previewed(
    sqlite_url: str,
) -> None:
    """Mutation caught: a due batch serving its second half before the next batch is claimed
    (before: stop a0, preview b0, stop a1, preview b1, stop a2, preview b2)."""
    calls: list[tuple[str, str | None]] = []
    clock, core, engine = _world(sqlite_url, calls)
    engine.run_pass()  # 21:59:30: nothing due yet
    assert calls == []
    clock.advance(30)
    engine.run_pass()  # 22:00: three due batches of one
    stops = [i for i, (m, _) in enumerate(calls) if m == "stop"]
    previews = [i for i, (m, _) in enumerate(calls) if m == "preview_capacity"]
    assert sorted(d for m, d in calls if m == "stop") == ["d0-a", "d1-a", "d2-a"]
    assert previews and max(stops) < min(previews), calls
    # the second halves still move in the same pass: each b is previewed there
    assert sorted({d for m, d in calls if m == "preview_capacity"}) == ["d0-b", "d1-b", "d2-b"]
    for _ in range(20):  # and the swaps finish: nothing was left behind by the split
        clock.advance(30)
        engine.run_pass()
    assert [core.get_deploy(f"d{i}-b").state for i in range(N)] == [DeployState.READY] * N
    assert [core.get_deploy(f"d{i}-a").state for i in range(N)] == [DeployState.STOPPED] * N
    assert sum(1 for m, _ in calls if m == "start") == N  # each acquire submitted once
