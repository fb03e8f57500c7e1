"""One origin launches a plan (``engine/launches.py``), without Dagster or a database: the
first claimer wins, another origin skips, a stale claim whose run never appeared is taken
over; and a run's one-line swap (``engine/ticks.py``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from gps_dagster.engine import ticks
from gps_dagster.engine.launches import CLAIM_TAKEOVER_S, batch_of, claim_plans
from gps_dagster.engine.reports import StepRef

T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Held:
    run_key: str
    origin: str
    claimed_at: datetime
    won: bool


class Claims:
    """The store's launch claims in memory: the first insert of a run key wins."""

    def __init__(self) -> None:
        self.rows: dict[str, Held] = {}

    def claim(self, run_key: str, *, transition_id: str, origin: str, now: datetime) -> Held:
        held = self.rows.setdefault(run_key, Held(run_key, origin, now, won=False))
        return replace(held, won=held.origin == origin)

    def get(self, run_key: str) -> Held | None:
        return self.rows.get(run_key)

    def take_over(self, held: Held, *, origin: str, now: datetime) -> bool:
        row = self.rows.get(held.run_key)
        if row is None or (row.origin, row.claimed_at) != (held.origin, held.claimed_at):
            return False
        self.rows[held.run_key] = Held(held.run_key, origin, now, won=False)
        return True


def test_the_first_origin_owns_a_plans_launch_and_the_others_skip_it() -> None:
    claims = Claims()
    keys = [("t1:plan", "t1")]
    assert claim_plans(claims, keys, origin="a", now=T0, runs_of=None) == ({"t1:plan"}, [])
    assert claim_plans(claims, keys, origin="a", now=T0, runs_of=None)[0] == {"t1:plan"}
    won, skipped = claim_plans(claims, keys, origin="b", now=T0, runs_of=None)
    assert won == set()
    assert skipped == [f"t1:plan: launched by a (claimed {T0.isoformat()})"]


def test_a_stale_claim_without_a_run_is_taken_over_once() -> None:
    claims = Claims()
    keys = [("t1:plan", "t1")]
    claim_plans(claims, keys, origin="a#batch-1", now=T0, runs_of=None)
    asked: list[tuple[str, str | None]] = []

    def none_ran(tid: str, batch: str | None) -> bool:
        asked.append((tid, batch))
        return False

    early = T0 + timedelta(seconds=CLAIM_TAKEOVER_S - 1)
    assert claim_plans(claims, keys, origin="b", now=early, runs_of=none_ran)[0] == set()
    assert asked == []  # too early: the instance is not even asked
    late = T0 + timedelta(seconds=CLAIM_TAKEOVER_S)
    assert claim_plans(claims, keys, origin="b", now=late, runs_of=lambda t, b: True)[0] == set()
    assert claim_plans(claims, keys, origin="b", now=late, runs_of=none_ran)[0] == {"t1:plan"}
    assert asked == [("t1", "batch-1")] and claims.rows["t1:plan"].origin == "b"
    assert batch_of("sensor:x") is None


def test_a_swap_reads_in_the_order_the_run_takes_it() -> None:
    a = StepRef("s1", "md-a", "stop", "release")
    b = StepRef("s2", "md-b", "start", "acquire")
    assert ticks.swap_line([a], [b], reverse=False) == "release md-a → acquire md-b"
    assert ticks.swap_line([a], [b], reverse=True) == "acquire md-b → release md-a"
    assert ticks.swap_line([], [b], reverse=False) == "acquire md-b"
