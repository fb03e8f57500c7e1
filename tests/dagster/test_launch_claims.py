"""The launch claims of plan run keys (store/launches.py) on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from gps_dagster.store import Store
from gps_dagster.store.launches import LaunchClaims

T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)


def test_the_first_origin_owns_a_launch_and_may_repeat_it(db_url: str) -> None:
    claims = LaunchClaims(Store.open(db_url).engine)
    first = claims.claim("tr-1:plan", transition_id="tr-1", origin="schedule:s", now=T0)
    other = claims.claim(
        "tr-1:plan", transition_id="tr-1", origin="sensor:r", now=T0 + timedelta(seconds=1)
    )
    again = claims.claim(
        "tr-1:plan", transition_id="tr-1", origin="schedule:s", now=T0 + timedelta(seconds=2)
    )
    assert (first.won, other.won, again.won) == (True, False, True)
    assert (other.origin, other.claimed_at) == ("schedule:s", T0)
    assert claims.claim("tr-2:plan", transition_id="tr-2", origin="sensor:r", now=T0).won


def test_a_takeover_moves_a_claim_once(db_url: str) -> None:
    claims = LaunchClaims(Store.open(db_url).engine)
    claims.claim("tr-1:plan", transition_id="tr-1", origin="schedule:s", now=T0)
    held = claims.claim("tr-1:plan", transition_id="tr-1", origin="sensor:r", now=T0)
    later = T0 + timedelta(minutes=5)
    assert claims.take_over(held, origin="sensor:r", now=later)
    assert not claims.take_over(held, origin="sensor:b", now=later)  # it moved since it was read
    now_held = claims.get("tr-1:plan")
    assert now_held is not None and (now_held.origin, now_held.claimed_at) == ("sensor:r", later)


def test_concurrent_claims_of_one_plan_have_exactly_one_winner(db_url: str) -> None:
    store = Store.open(db_url)
    barrier = threading.Barrier(4)
    won: list[str] = []

    def claim(origin: str) -> None:
        claims = LaunchClaims(store.engine)
        barrier.wait()
        if claims.claim("tr-9:plan", transition_id="tr-9", origin=origin, now=T0).won:
            won.append(origin)

    threads = [threading.Thread(target=claim, args=(f"sensor:{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(won) == 1, won
    held = LaunchClaims(store.engine).get("tr-9:plan")
    assert held is not None and held.origin == won[0]
