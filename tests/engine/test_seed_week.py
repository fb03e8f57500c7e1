"""The seed week end to end (SPEC §1): every boundary, maint-wed, never over 10 GPUs."""

from __future__ import annotations

from datetime import datetime, timedelta

from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.simulation import simulate
from tests.engine.harness import SEED_MONDAY, seed_pool, seed_schedule

TZ = SEED_MONDAY.tzinfo


def _week():  # type: ignore[no-untyped-def]
    spec = load_schedule(seed_schedule())
    return simulate(spec, load_pool(seed_pool()), SEED_MONDAY, SEED_MONDAY + timedelta(days=7))


def local(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def test_every_boundary_of_the_seed_week_swaps_a_and_b_release_first() -> None:
    rep = _week()
    swaps = [t for t in rep.transitions if t["steps"]]
    boundaries = [t["boundary"].astimezone(TZ).strftime("%a %H:%M") for t in swaps]
    assert boundaries == [
        "Mon 08:00",
        "Mon 18:00",
        "Tue 08:00",
        "Tue 18:00",
        "Wed 08:00",
        "Wed 13:00",
        "Wed 15:00",
        "Wed 18:00",
        "Thu 08:00",
        "Thu 18:00",
        "Fri 08:00",
        "Fri 18:00",
    ]
    for t in swaps:
        release = [s for s in t["steps"] if s["order"] == "release"]
        acquire = [s for s in t["steps"] if s["order"] == "acquire"]
        assert len(release) == 1 and len(acquire) == 1
        assert release[0]["step"] == "stop" and acquire[0]["step"] == "start"
        assert {s["state"] for s in t["steps"]} == {"converged"}
        # release first: the start reached the core only after the stop had been accepted
        assert acquire[0]["submitted_at"] >= release[0]["accepted_at"]
    wed = {
        t["boundary"].astimezone(TZ).strftime("%H:%M"): t
        for t in swaps
        if t["boundary"].astimezone(TZ).day == 21
    }
    assert [s["target"] for s in wed["13:00"]["steps"] if s["step"] == "stop"] == ["md-llama70b"]
    assert [s["target"] for s in wed["15:00"]["steps"] if s["step"] == "stop"] == ["md-qwen32b"]


def test_the_pool_never_holds_more_than_ten_gpus_and_c_is_never_touched() -> None:
    rep = _week()
    assert rep.capacity == 10
    assert rep.max_gpus_desired == 10
    assert rep.max_gpus_in_use <= 10
    assert all(p["by_holder"].get("md-bge-embed") == 2 for p in rep.gpu_usage)
    assert not [o for o in rep.operations if o["deploy"] == "md-bge-embed"]
    assert {s["phase"] for s in rep.final_status.values()} == {"converged"}


def test_each_core_mutation_happens_exactly_once_per_step() -> None:
    rep = _week()
    keys = [o["key"] for o in rep.operations]
    assert len(keys) == len(set(keys))
    assert (
        len([o for o in rep.operations if o["deploy"] == "md-llama70b" and o["kind"] == "stop"])
        == 6
    )
    assert (
        len([o for o in rep.operations if o["deploy"] == "md-qwen32b" and o["kind"] == "start"])
        == 6
    )
