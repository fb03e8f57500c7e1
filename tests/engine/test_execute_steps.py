"""``Engine.execute_steps`` decides as ``execute_step`` does, on shared round trips (issue 13).

The same storm-like situation is built twice, on two fresh databases: plans opened by a
boundary (``reconcile``, as the Dagster sensor does), then things change before the batch
run gets to them (an alias guard that stopped answering, a deleted deploy, an edited
schedule, too few free GPUs). One world runs the steps one at a time (``execute_step``), the
other with ``execute_steps``; every outcome, step row, target status and core mutation must
be the same. A last test counts the transactions and core sessions of 50 releases: a loop
over ``execute_step`` costs several of each per step.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig, PlanRef
from gps_dagster.store import Store
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.memory import MemoryStore
from tests.engine.cores import DeletedDeploys

T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")
BOUNDARY = datetime.fromisoformat("2026-10-19T22:00:00+07:00")
HAPPY, UNWIRED, GONE, EDITED, CONSENT, FITS, WAITS = range(7)
N = 7
MEMORY = "memory:"
"""A ``two_urls`` URL for a ``MemoryStore`` (the path: where its pool's SQLite file goes)."""


def pool_doc(n: int, spare: int) -> dict[str, Any]:
    """``n`` pairs (a running, b stopped) of one GPU each; ``spare`` GPUs free at the boundary."""
    deploys = []
    for i in range(n):
        aliases = ["chat-prod"] if i == CONSENT else []
        deploys.append(
            {"id": f"d{i}-a", "gpus_per_replica": 1, "state": "running", "aliases": aliases}
        )
        deploys.append({"id": f"d{i}-b", "gpus_per_replica": 1, "state": "stopped"})
    nodes = [{"name": "n0", "gpus": n + spare}]
    return {"name": "lane", "nodes": nodes, "deploys": deploys, "sim": {"record_usage": False}}


def schedule_doc(i: int, *, priority: int = 10) -> dict[str, Any]:
    return {
        "name": f"s{i:04d}",
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [
            {
                "model_deploy_id": f"d{i}-a",
                "default_state": "running",
                "default_allow_downtime": i == CONSENT,
            },
            {"model_deploy_id": f"d{i}-b", "default_state": "stopped"},
        ],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": priority,
                "cron": "0 22 * * *",
                "duration": "6h",
                "states": [
                    {"model_deploy_id": f"d{i}-a", "desired_state": "stopped"},
                    {"model_deploy_id": f"d{i}-b", "desired_state": "running"},
                ],
            }
        ],
    }


@dataclass
class Lane:
    store: Store
    pool: SimPool
    core: DeletedDeploys
    engine: Engine
    plans: list[PlanRef]


def opened(url: str, n: int, *, spare: int) -> Lane:
    """``n`` schedules whose 22:00 plans were opened by a boundary pass (steps not run)."""
    clock = VirtualClock(T0)
    if url.startswith(MEMORY):  # the in-memory store; the pool's tables in a SQLite file
        store: Any = MemoryStore(clock)
        db = create_db_engine(f"sqlite:///{url.removeprefix(MEMORY)}.pool.sqlite")
    else:
        store = Store.open(url)
        db = store.engine
    pool = SimPool.create(db, load_pool(pool_doc(n, spare)), clock, replace=True)
    for i in range(n):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=T0)
    store.set_gate("enforce", now=T0)
    core = DeletedDeploys(pool)
    engine = Engine(store, core, clock, EngineConfig())  # type: ignore[arg-type]
    engine.run_pass()  # the defaults already hold: no plan
    clock.set(BOUNDARY)
    report = engine.reconcile()
    plans = sorted(report.plans, key=lambda p: p.schedule)
    assert [p.schedule for p in plans] == [f"s{i:04d}" for i in range(n)]
    return Lane(store, pool, core, engine, plans)


def upset(lane: Lane) -> None:
    """What changed between the boundary and the batch run."""
    lane.pool.inject_fault(FaultSpec(effect="alias_guard_unwired", deploy=f"d{UNWIRED}-a"))
    lane.core.delete(f"d{GONE}-b")
    lane.store.apply_schedule(load_schedule(schedule_doc(EDITED, priority=20)), now=BOUNDARY)


def run(lane: Lane, *, batched: bool) -> list[tuple[str, str, str | None, str | None]]:
    """Every release, then every acquire, as a batch run's ops do; their outcomes."""
    outcomes = []
    for order in ("release", "acquire"):
        ids = [
            s.step_id
            for p in lane.plans
            for s in (p.release_steps if order == "release" else p.acquire_steps)
        ]
        got = (
            lane.engine.execute_steps(ids)
            if batched
            else [lane.engine.execute_step(i) for i in ids]
        )
        assert [o.step_id for o in got] == ids
        outcomes += [(o.deploy_id, o.state, o.phase, o.reason) for o in got]
    return outcomes


def snapshot(lane: Lane) -> dict[str, Any]:
    return {
        "steps": sorted(
            (a.deploy_id, a.order, a.state, a.reason) for a in lane.store.list_actions()
        ),
        "status": sorted((s.deploy_id, s.phase, s.reason, s.fix) for s in lane.store.list_status()),
        "ops": sorted(
            (o.deploy_id, o.kind.value, o.idempotency_key) for o in lane.pool.operation_log()
        ),
    }


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def two_urls(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, str]]:
    """Two fresh, empty databases of one kind (one per way of running the steps); ``memory``:
    two ``MemoryStore``s (``opened``)."""
    if request.param == "memory":
        yield f"{MEMORY}{tmp_path / 'one'}", f"{MEMORY}{tmp_path / 'batch'}"
        return
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'one.sqlite'}", f"sqlite:///{tmp_path / 'batch.sqlite'}"
        return
    server = str(request.getfixturevalue("pg_server_url"))
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    with admin.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base, _, query = server.partition("?")
    root = base.rsplit("/", 1)[0]
    one, batch = (f"{root}/{n}" + (f"?{query}" if query else "") for n in names)
    yield one, batch
    with admin.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_execute_steps_decides_every_situation_as_execute_step(two_urls: tuple[str, str]) -> None:
    url_one, url_batch = two_urls
    one, batch = opened(url_one, N, spare=3), opened(url_batch, N, spare=3)
    upset(one)
    upset(batch)

    alone = run(one, batched=False)
    together = run(batch, batched=True)

    assert together == alone
    assert snapshot(batch) == snapshot(one)
    # and the situations are the ones meant (what makes the comparison worth something)
    releases = {d: (state, phase, reason) for d, state, phase, reason in together[:N]}
    assert releases[f"d{HAPPY}-a"][0] == "accepted"
    assert releases[f"d{CONSENT}-a"][0] == "accepted"  # aliased, with consent
    assert releases[f"d{UNWIRED}-a"][0] == "failed"
    assert releases[f"d{GONE}-a"][0] == "failed"
    assert releases[f"d{EDITED}-a"][:1] == ("superseded",)
    status = {s.deploy_id: s for s in batch.store.list_status()}
    assert (status[f"d{UNWIRED}-a"].phase, status[f"d{UNWIRED}-a"].reason) == (
        "alias_blocked",
        "alias_guard_unwired",
    )
    assert (status[f"d{GONE}-a"].phase, status[f"d{GONE}-a"].reason) == (
        "ineligible",
        "target_failed",
    )
    acquires = {d: state for d, state, _, _ in together[N:]}
    assert acquires[f"d{UNWIRED}-b"] == acquires[f"d{GONE}-b"] == "cancelled"
    # three spare GPUs: the first three acquires in plan order get one each (never the same
    # one twice, whether the core's session counts previews or not), the last waits for a stop
    assert (
        acquires[f"d{HAPPY}-b"]
        == acquires[f"d{CONSENT}-b"]
        == acquires[f"d{FITS}-b"]
        == ("accepted")
    )
    assert acquires[f"d{WAITS}-b"] == "capacity_wait"
    stops = {d for d, kind, _ in snapshot(batch)["ops"] if kind == "stop"}
    assert stops == {f"d{i}-a" for i in (HAPPY, CONSENT, FITS, WAITS)}


def test_execute_steps_runs_only_the_steps_it_is_given(sqlite_url: str) -> None:
    lane = opened(sqlite_url, 3, spare=3)
    first = lane.plans[0].release_steps[0]
    [outcome] = lane.engine.execute_steps([first.step_id])
    assert outcome.state == "accepted"
    moved = {a.deploy_id for a in lane.store.list_actions() if a.state != "pending"}
    assert moved == {first.deploy_id}  # not the other releases, not its own plan's acquire
    assert [o.deploy_id for o in lane.pool.operation_log()] == [first.deploy_id]
    # a step given twice, and one that does not exist
    again = lane.engine.execute_steps([first.step_id, first.step_id, "act-nope"])
    assert [o.state for o in again] == ["accepted", "accepted", "failed"]
    assert again[2].reason == "unknown_step"
    assert len(lane.pool.operation_log()) == 1


class Counted:
    """Counts the store's transactions and the core's sessions and calls."""

    def __init__(self, lane: Lane) -> None:
        self.transactions = 0
        self.sessions = 0
        self.fences = 0
        self.submit_many = 0
        sa.event.listen(lane.store.engine, "begin", self._begin)
        real_batch, real_fence = lane.pool.batch, lane.store.fence_many

        def batch() -> Any:
            self.sessions += 1
            return real_batch()

        def fence(*args: Any, **kw: Any) -> Any:
            self.fences += 1
            return real_fence(*args, **kw)

        real_many = lane.pool.submit_many

        def submit_many(*args: Any, **kw: Any) -> Any:
            self.submit_many += 1
            return real_many(*args, **kw)

        lane.pool.batch = batch  # type: ignore[method-assign]
        lane.pool.submit_many = submit_many  # type: ignore[method-assign]
        lane.store.fence_many = fence  # type: ignore[method-assign]

    def _begin(self, _conn: Any) -> None:
        self.transactions += 1


@pytest.mark.postgres
@pytest.mark.parametrize("batched", [True, False])
def test_fifty_releases_cost_a_bounded_number_of_round_trips(pg_url: str, batched: bool) -> None:
    """On PostgreSQL, where the sim's core sessions are real (the Dagster deployment's case)."""
    lane = opened(pg_url, 50, spare=0)
    ids = [s.step_id for p in lane.plans for s in p.release_steps]
    counted = Counted(lane)

    got = lane.engine.execute_steps(ids) if batched else [lane.engine.execute_step(i) for i in ids]

    assert [o.state for o in got] == ["accepted"] * 50
    assert len(lane.pool.operation_log()) == 50
    if batched:
        # the reads, one re-check session, one fence, the submit through submit_many (its own
        # session of 50), one accepted write
        assert counted.fences == 1  # one fence transaction for the 50
        assert counted.sessions == 2, counted.sessions  # the re-check's, submit_many's
        # 13 before submit_many. The 112 counted at first were this test's own core wrapper
        # sending the 50 writes one by one (submit_each); through the pool's submit_many they
        # share one transaction again.
        assert counted.submit_many == 1, counted.submit_many
        assert counted.transactions <= 20, counted.transactions
    else:  # the yardstick the bound is set against: a loop over execute_step
        assert counted.fences == 50  # a batch of one each
        assert counted.transactions >= 500, counted.transactions  # 1151 when written


def test_a_step_another_pass_recorded_while_its_submit_was_in_flight_is_reported_not_lost(
    sqlite_url: str,
) -> None:
    """Between the fence (``submitting``) and the accepted write, another pass may resubmit the
    step with its key and record it (seen in the Dagster benchmark: a pre-armed run's ``arm`` op
    and a reconcile pass, both at the boundary). The accepted write then moves nothing; the step
    is reported as it stands (the lone runner re-reads it), never dropped: ``execute_steps``
    raised ``KeyError`` and failed the run that had just sent the release."""
    lane = opened(sqlite_url, 1, spare=3)
    (release,) = lane.plans[0].release_steps
    other = Engine(lane.store, lane.core, lane.engine.clock, EngineConfig())  # type: ignore[arg-type]
    real_many = lane.pool.submit_many
    raced: list[int] = []

    def submit_many(*args: Any, **kw: Any) -> Any:
        results = real_many(*args, **kw)
        if not raced:  # the other pass's own submit goes through this pool too
            raced.append(1)
            assert other.execute_step(release.step_id).state == "accepted"  # resubmitted
        return results

    lane.pool.submit_many = submit_many  # type: ignore[method-assign]
    (outcome,) = lane.engine.execute_steps([release.step_id])
    assert (outcome.step_id, outcome.state) == (release.step_id, "accepted")
    (row,) = [a for a in lane.store.list_actions() if a.id == release.step_id]
    assert row.state == "accepted"
    assert [o.deploy_id for o in lane.pool.operation_log()] == [release.deploy_id]  # one stop


READS = ("get_deploys", "get_deploy", "alias_guard", "check_quota", "check_billing")


def _count_reads(pool: SimPool) -> dict[str, int]:
    """Calls of the core's reads a release's re-check makes (deploys, alias guard, preflight)."""
    calls = dict.fromkeys(READS, 0)
    for name in READS:
        real = getattr(pool, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kw)

        setattr(pool, name, counted)
    return calls


def test_the_releases_of_a_plan_its_own_pass_just_opened_are_not_read_again(
    sqlite_url: str,
) -> None:
    """``fresh``: a pre-armed run submits the releases of the plan its pass opened and
    preflighted a moment ago, at the boundary; a second read of the deploys, the alias guard and
    the preflight stood between the boundary and the submit (each a core round trip, each a
    database transaction for the simulator). Plans not named fresh are re-checked as before."""
    lane = opened(sqlite_url, 2, spare=3)
    calls = _count_reads(lane.pool)
    fresh, stale = lane.plans
    (outcome,) = lane.engine.execute_steps(
        [fresh.release_steps[0].step_id], fresh={fresh.transition_id}
    )
    assert outcome.state == "accepted"
    assert calls == dict.fromkeys(READS, 0)  # submitted on the pass's own reads
    (outcome,) = lane.engine.execute_steps(
        [stale.release_steps[0].step_id], fresh={fresh.transition_id}
    )
    assert outcome.state == "accepted"
    assert calls["alias_guard"] >= 1 and calls["get_deploys"] == 1  # re-checked, as before
