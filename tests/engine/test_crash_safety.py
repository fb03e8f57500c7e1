"""Crash safety (SPEC R-PASS-10): crash at every step boundary, restart, mutate exactly once.

Two kinds of crash. The pool's own faults crash the *core call* (before the
mutation, before its commit, after its commit) or lose its response. A
delegating ``Core`` wrapper crashes the *engine process* around a call: after
the fence committed but before the submit reached the core, after the core
answered but before the engine recorded ``accepted``, and after ``accepted``.
Each time a brand-new ``Engine`` continues on the same store and pool, and the
pool's operation log proves every (deploy, kind, idempotency key) happened
exactly once and the swap converged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest

from gps_dagster.backends.sim import SimPool, SimulatedCrash
from gps_dagster.domain.pool import FaultSpec
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import DeployState, Operation, Submission, submit_each
from tests.engine.harness import A, B, World, a_running_pool, local, make_world, op_triples

EVENING = local("2026-10-19T17:59:30")
DONE = local("2026-10-19T18:08")


class EngineCrash(BaseException):
    """The engine process died (like ``SimulatedCrash``, nothing may catch it)."""


class CrashingCore:
    """The real pool seen through a process that dies once around ``method``.

    A plain delegating wrapper: every call goes to the real ``SimPool``; the
    first call of ``method`` raises before delegating (``after=False``) or
    right after the real call returned (``after=True``).
    """

    def __init__(self, pool: SimPool, method: str, *, after: bool = False) -> None:
        self._pool, self._method, self._after = pool, method, after
        self.crashed = False

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        return submit_each(self, submissions)  # every call through this wrapper

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._pool, name)
        if name != self._method:
            return real

        def call(*args: Any, **kw: Any) -> Any:
            if self.crashed:
                return real(*args, **kw)
            self.crashed = True
            if not self._after:
                raise EngineCrash(f"engine died before {name}")
            real(*args, **kw)
            raise EngineCrash(f"engine died after {name} returned")

        return call


def restart(w: World, n: int) -> None:
    """A new engine process: new instance, same store and pool, another holder name."""
    w.engine = Engine(w.store, w.pool, w.clock, EngineConfig(holder=f"engine-{n}"))


def run_with_crashes(w: World, until: datetime) -> int:
    crashes = 0
    while w.clock.now() < until:
        try:
            w.engine.run_pass()
        except (SimulatedCrash, EngineCrash):
            crashes += 1
            restart(w, crashes + 1)
        w.clock.advance(30)
    return crashes


def assert_swapped_exactly_once(w: World) -> None:
    triples = op_triples(w)
    assert len(triples) == len(set(triples))
    assert [(d, k) for d, k, _ in triples] == [(A, "stop"), (B, "start")]
    by_deploy = {d: key for d, _, key in triples}
    for a in w.store.list_actions():
        assert a.state == "converged"
        assert by_deploy[a.deploy_id] == a.idempotency_key
    ops = {o.deploy_id: o.id for o in w.pool.operation_log()}
    assert {a.deploy_id: a.operation_ids for a in w.store.list_actions()} == {
        A: [ops[A]],
        B: [ops[B]],
    }
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"
    assert w.deploy(A).state is DeployState.STOPPED and w.deploy(B).state is DeployState.READY


@pytest.mark.parametrize("op", ["stop", "start"])
@pytest.mark.parametrize("point", ["before_mutation", "before_commit", "after_commit"])
def test_core_crash_at_each_point_then_a_new_engine_mutates_exactly_once(
    sqlite_url: str, op: Any, point: Any
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.pool.inject_fault(FaultSpec(effect="crash", op=op, point=point))
    assert run_with_crashes(w, DONE) == 1
    assert_swapped_exactly_once(w)


@pytest.mark.parametrize("op", ["stop", "start"])
def test_lost_response_is_resubmitted_with_the_same_key(sqlite_url: str, op: Any) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.pool.inject_fault(FaultSpec(effect="lose_response", op=op))
    assert run_with_crashes(w, DONE) == 0
    assert_swapped_exactly_once(w)
    unconfirmed = [e for e in w.store.list_events(limit=1000) if e.kind == "submit_unconfirmed"]
    assert len(unconfirmed) == 1
    accepted = [e for e in w.store.list_events(limit=1000) if e.kind == "action_accepted"]
    flags = {e.deploy_id: bool((e.detail or {}).get("resubmitted")) for e in accepted}
    assert flags == {A: op == "stop", B: op == "start"}


EngineCrashPoint = Callable[[SimPool], CrashingCore]


@pytest.mark.parametrize(
    ("name", "wrap"),
    [
        # the fence committed (action ``submitting``) and the process died before Stop reached the
        # core
        ("after_fence_before_submit", lambda pool: CrashingCore(pool, "stop")),
        # the core applied Stop; the process died before recording ``accepted``
        ("after_submit_before_recording", lambda pool: CrashingCore(pool, "stop", after=True)),
        # Stop recorded ``accepted``; the process died previewing B's capacity
        ("after_accepted", lambda pool: CrashingCore(pool, "preview_capacity")),
        # the same three around B's Start
        ("start_after_fence_before_submit", lambda pool: CrashingCore(pool, "start")),
        (
            "start_after_submit_before_recording",
            lambda pool: CrashingCore(pool, "start", after=True),
        ),
    ],
)
def test_engine_crash_at_each_step_boundary_then_a_new_engine_continues(
    sqlite_url: str, name: str, wrap: EngineCrashPoint
) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    core = wrap(w.pool)
    w.engine = Engine(w.store, core, w.clock, EngineConfig(holder="engine-1"))  # type: ignore[arg-type]
    assert run_with_crashes(w, DONE) == 1
    assert core.crashed
    assert_swapped_exactly_once(w)


def test_engine_crash_after_fence_leaves_the_step_submitting_for_the_next_engine(
    db_url: str,
) -> None:
    w = make_world(db_url, pool=a_running_pool(), start=local("2026-10-19T18:00"))
    core = CrashingCore(w.pool, "stop")
    w.engine = Engine(w.store, core, w.clock, EngineConfig(holder="engine-1"))  # type: ignore[arg-type]
    with pytest.raises(EngineCrash):
        w.engine.run_pass()
    (stop,) = [a for a in w.store.list_actions() if a.deploy_id == A]
    assert stop.state == "submitting" and stop.submitted_at == local("2026-10-19T18:00")
    assert op_triples(w) == []
    restart(w, 2)  # also proves the pass lock was let go by the dead engine's pass
    w.clock.advance(30)
    report = w.engine.run_pass()
    assert not report.busy
    assert [(d, k, key) for d, k, key in op_triples(w)] == [(A, "stop", stop.idempotency_key)]
    w.run_until(DONE)
    assert_swapped_exactly_once(w)


def test_a_retry_can_lose_its_response_too(sqlite_url: str) -> None:
    w = make_world(sqlite_url, pool=a_running_pool(), start=EVENING)
    w.pool.inject_fault(FaultSpec(effect="lose_response", op="stop", times=2))
    w.run_until(DONE)
    assert_swapped_exactly_once(w)
    unconfirmed = [e for e in w.store.list_events(limit=1000) if e.kind == "submit_unconfirmed"]
    assert len(unconfirmed) == 2  # the first submit and its retry both lost their answer
