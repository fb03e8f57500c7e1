"""The holder keeps a time-sliced GPU group alive through a swap (R-GPS-6), read off the usage
history."""

from __future__ import annotations

from typing import Any

from gps_sim import RSV, A, B, engine_world, gpu42_schedule, local, shared_pool

from gps_dagster.backends.sim import snapshot

HOLDER = f"holder:{RSV}"


def schedule_without_c() -> dict[str, Any]:
    doc: dict[str, Any] = gpu42_schedule()
    doc["targets"] = [t for t in doc["targets"] if t["model_deploy_id"] != "md-vision-embed"]
    return doc


def test_the_holder_arrives_with_the_last_member_leaving_and_goes_when_one_is_ready(
    sqlite_url: str,
) -> None:
    w = engine_world(
        sqlite_url,
        shared_pool({A: 96_000, B: 80_000}, running=(B,)),
        schedule_without_c(),
        local("2026-10-19T07:59:30"),
    )
    w.run_until(local("2026-10-19T08:10"))
    w.clock.set(local("2026-10-19T17:59:30"))
    w.run_until(local("2026-10-19T18:10"))
    history = w.pool.usage_history()
    occupants = [p.shared.get(RSV, []) for p in history]
    assert all(occupants), "the GPU group was empty at some point"
    assert occupants[0] == [B] and occupants[-1] == [B]
    with_holder = [o for o in occupants if HOLDER in o]
    assert [HOLDER, A] in with_holder and [
        HOLDER,
        B,
    ] in with_holder  # B->A and A->B both kept the group
    assert all(p.in_use.get(RSV) == 1 for p in history)  # one shared GPU the whole time
    assert (w.status(A).phase, w.status(B).phase) == ("converged", "converged")


def test_with_every_member_stopped_the_holder_stays_until_a_member_runs(sqlite_url: str) -> None:
    w = engine_world(
        sqlite_url,
        shared_pool({A: 96_000, B: 80_000}, running=(B,)),
        schedule_without_c(),
        local("2026-10-19T07:59:30"),
    )
    w.stop(B)  # by hand, no successor yet
    assert w.pool.usage_history()[-1].shared == {RSV: [HOLDER]}
    gpu0 = snapshot(w.pool).gpus[0]
    assert (gpu0.state, gpu0.holder) == ("held", RSV)
    w.start(A)
    w.clock.advance(60)
    assert w.pool.usage_history()[-1].shared == {RSV: sorted([HOLDER, A])}
    w.clock.advance(60)
    w.pool.settle()
    assert w.pool.usage_history()[-1].shared == {RSV: [A]}
