"""Desired GPUs against capacity (R-EVAL-5) on the seed's pools (examples/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.pool import load_pool, parse_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.timeline import gpu_timeline

from .helpers import at

EXAMPLES = Path(__file__).parents[2] / "examples"
HCM = "Asia/Ho_Chi_Minh"
WEEK = (at(HCM, 2026, 10, 19), at(HCM, 2026, 10, 26))


def example_schedule(name: str):  # type: ignore[no-untyped-def]
    return load_schedule(json.loads((EXAMPLES / name).read_text()), source=name)


def example_pool(name: str):  # type: ignore[no-untyped-def]
    return parse_pool((EXAMPLES / name).read_text(), source=name)


def test_seed_week_never_exceeds_the_10_gpu_pool() -> None:
    segs = gpu_timeline(
        example_schedule("seed-schedule.json"), example_pool("seed-pool-10.yaml"), *WEEK
    )
    # business hours A 8 + C 2 = 10; otherwise B 6 + C 2 = 8; maint-wed B + C = 8
    got = [(s.start.day, s.start.hour, s.desired_gpus) for s in segs]
    want = [(19, 0, 8)]
    for day in (19, 20, 21, 22, 23):
        if day == 21:
            want += [(21, 8, 10), (21, 13, 8), (21, 15, 10), (21, 18, 8)]
        else:
            want += [(day, 8, 10), (day, 18, 8)]
    assert got == want
    assert {s.capacity for s in segs} == {10} and not any(s.overcommit for s in segs)
    assert segs[0].start == WEEK[0] and segs[-1].end == WEEK[1]


def test_scenario2_fills_the_16_gpu_pool_all_week() -> None:
    segs = gpu_timeline(
        example_schedule("scenario2-schedule.json"), example_pool("seed-pool-16.yaml"), *WEEK
    )
    assert [(s.desired_gpus, s.capacity, s.overcommit) for s in segs] == [(16, 16, False)]


def test_overcommit_is_flagged() -> None:
    pool = example_pool("seed-pool-10.yaml").model_dump()
    pool["deploys"][2]["gpus_per_replica"] = (
        4  # C 4: business hours A 8 + C 4 = 12 > 10; B 6 + C 4 = 10
    )
    segs = gpu_timeline(example_schedule("seed-schedule.json"), load_pool(pool), *WEEK)
    over = [(s.start.day, s.start.hour, s.desired_gpus) for s in segs if s.overcommit]
    assert over == [(19, 8, 12), (20, 8, 12), (21, 8, 12), (21, 15, 12), (22, 8, 12), (23, 8, 12)]
    assert all(s.desired_gpus > s.capacity for s in segs if s.overcommit)
    assert all(s.desired_gpus <= s.capacity for s in segs if not s.overcommit)


def test_window_replicas_count_per_replica_gpus() -> None:
    doc = json.loads((EXAMPLES / "scenario2-schedule.json").read_text())
    doc["windows"][0]["states"][1]["desired_state"] = "running"  # qwen keeps running: 16 + 8 = 24
    sched = load_schedule(doc)
    segs = gpu_timeline(sched, example_pool("seed-pool-16.yaml"), *WEEK)
    assert [(s.start.hour, s.desired_gpus, s.overcommit) for s in segs[:3]] == [
        (0, 16, False),
        (8, 24, True),
        (18, 16, False),
    ]


def test_a_target_missing_from_the_pool_is_an_error_with_a_path() -> None:
    with pytest.raises(SpecInvalid) as info:
        gpu_timeline(
            example_schedule("seed-schedule.json"), example_pool("seed-pool-16.yaml"), *WEEK
        )
    assert [(e.path, e.reason) for e in info.value.errors] == [
        ("targets[1].model_deploy_id", "unknown_deploy")
    ]
