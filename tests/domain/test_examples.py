"""Every example schedule validates and every example pool parses (examples/ is documentation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import parse_schedule

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize(
    ("name", "schedule_name", "targets", "windows"),
    [
        (
            "seed-schedule.json",
            "gpu-pool-h100-shared",
            ("md-llama70b", "md-qwen32b"),
            ("business-hours", "maint-wed"),
        ),
        (
            "scenario2-schedule.json",
            "gpu-pool-h100-16",
            ("md-llama70b", "md-qwen-8gpu"),
            ("business-hours",),
        ),
    ],
)
def test_example_schedules(
    name: str, schedule_name: str, targets: tuple[str, ...], windows: tuple[str, ...]
) -> None:
    s = parse_schedule((EXAMPLES / name).read_text(), source=name)
    assert (s.name, s.target_ids, tuple(w.name for w in s.windows)) == (
        schedule_name,
        targets,
        windows,
    )


@pytest.mark.parametrize(
    ("name", "capacity", "deploys"),
    [
        ("seed-pool-10.yaml", 10, {"md-llama70b": 8, "md-qwen32b": 6, "md-bge-embed": 2}),
        ("seed-pool-16.yaml", 16, {"md-llama70b": 8, "md-qwen-8gpu": 8}),
    ],
)
def test_example_pools(name: str, capacity: int, deploys: dict[str, int]) -> None:
    pool = parse_pool((EXAMPLES / name).read_text(), source=name)
    assert pool.capacity == capacity
    assert {d.id: d.gpus_per_replica for d in pool.deploys} == deploys
