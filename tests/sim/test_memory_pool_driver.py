"""``MemoryPool`` against ``SimPool`` on the driver surface the contract suite does not reach.

Both pools are driven through the same script — a swap, an intruder grabbing published GPUs,
a static foreign workload coming and going, a project's billing and quota changed, a
never-ready fault injected then cleared — and after every step they must agree on what the
observer sees, the usage history, the operation log, the faults listed and the next event.
After every step the in-memory pool's indexes must also equal the ones rebuilt from its
records (``PoolState.copy``): an index a write forgot to update would make a later pass read
a stale free count or miss a due event.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.backends.sim.memory import MemoryPool
from gps_dagster.backends.sim.memory.state import PoolState
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, parse_pool
from gps_dagster.ports import AdmissionRefused, BillingRefused, NotFound, QuotaRefused
from gps_dagster.store.db import create_db_engine
from tests.contract.contract_pools import accounts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
A, B, C = "md-llama70b", "md-qwen32b", "md-bge-embed"

Pool = SimPool | MemoryPool
Step = Callable[[Pool, VirtualClock], object]


def _stop(pool: Pool, deploy: str, key: str) -> None:
    pool.stop(
        deploy, etag=pool.get_deploy(deploy).etag, allow_aliased_downtime=True, idempotency_key=key
    )


def _start(pool: Pool, deploy: str, key: str) -> object:
    try:
        return pool.start(deploy, etag=pool.get_deploy(deploy).etag, idempotency_key=key)
    except (AdmissionRefused, BillingRefused, QuotaRefused) as exc:
        return type(exc).__name__


SCRIPT: list[tuple[str, Step]] = [
    (
        "intruder waits for published GPUs",
        lambda p, c: p.add_foreign("intruder", 2, kind="intruder"),
    ),
    ("B stops", lambda p, c: _stop(p, B, "b-stop")),
    ("grace and lag pass: the intruder grabs", lambda p, c: (c.advance(95), p.settle())),
    ("A starts (does not fit yet)", lambda p, c: _start(p, A, "a-start")),
    ("intruder leaves", lambda p, c: p.remove_foreign("intruder")),
    (
        "A is placed once published, then ready",
        lambda p, c: (c.advance(100), p.settle(), c.advance(130), p.settle()),
    ),
    ("C stops", lambda p, c: _stop(p, C, "c-stop")),
    (
        "static workload takes the freed GPUs",
        lambda p, c: (c.advance(95), p.settle(), p.add_foreign("static", 2)),
    ),
    ("C starts and waits", lambda p, c: _start(p, C, "c-start")),
    ("static workload ends", lambda p, c: p.remove_foreign("static")),
    ("C is placed once published: starting", lambda p, c: (c.advance(95), p.settle())),
    (
        "C never gets ready: a fault while it starts",
        lambda p, c: p.inject_fault(FaultSpec(effect="never_ready", deploy=C)),
    ),
    ("C stays starting", lambda p, c: (c.advance(300), p.settle())),
    (
        "faults cleared: C gets a fresh start delay",
        lambda p, c: (p.clear_faults(), c.advance(121), p.settle()),
    ),
    ("a replayed key mutates nothing", lambda p, c: _start(p, C, "c-start")),
]


def _pools(url: str) -> tuple[tuple[SimPool, VirtualClock], tuple[MemoryPool, VirtualClock]]:
    spec = parse_pool((EXAMPLES / "seed-pool-10.yaml").read_text())
    sql_clock, mem_clock = VirtualClock(T0), VirtualClock(T0)
    return (SimPool.create(create_db_engine(url), spec, sql_clock), sql_clock), (
        MemoryPool.create(spec, mem_clock),
        mem_clock,
    )


def _picture(pool: Pool) -> tuple[object, ...]:
    return (
        pool.observe(),
        pool.usage_history(),
        pool.operation_log(),
        pool.faults(),
        pool.next_event_at(),
    )


def _indexes(state: PoolState) -> tuple[object, ...]:
    return (
        state.free_on,
        state.by_holder,
        state.timed,
        set(state.timed_groups),
        {k: v for k, v in state.in_state.items() if v},
        state.held_count,
        state.pending,
    )


def test_memory_pool_follows_sim_pool_through_the_driver_script(sqlite_url: str) -> None:
    (sql, sql_clock), (mem, mem_clock) = _pools(sqlite_url)
    for name, step in SCRIPT:
        assert step(mem, mem_clock) == step(sql, sql_clock), name
        assert _picture(mem) == _picture(sql), name
        assert _indexes(mem.state) == _indexes(mem.state.copy()), (
            f"{name}: an index drifted from the records"
        )
    assert len(sql.usage_history()) >= 8  # the script moved the GPU picture many times


@pytest.mark.parametrize(
    ("billing", "quota", "answer"),
    [
        ("unpaid", 12, "BillingRefused"),
        ("paid", 6, "QuotaRefused"),
        ("paid", 12, "accepted"),
    ],
)
def test_project_changes_answer_as_sim_pool(
    sqlite_url: str, billing: str, quota: int, answer: str
) -> None:
    """``set_project`` (an admin action) changes what admission says, alike on both pools."""
    answers = []
    for pool in (
        SimPool.create(create_db_engine(sqlite_url), accounts(), VirtualClock(T0)),
        MemoryPool.create(accounts(), VirtualClock(T0)),
    ):
        pool.set_project("team", billing=billing, gpu_quota=quota)
        with pytest.raises(NotFound):
            pool.set_project("no-such-project", billing="paid")
        started = _start(pool, "t-big", "k")  # team: 4 held + 4 more
        answers.append(
            (started if isinstance(started, str) else started.state.value, pool.revision())
        )  # type: ignore[attr-defined]
    assert answers[0] == answers[1]
    assert answers[0][0] == answer
