"""Benchmark: one-week intent timelines for 10,000 random schedules.

Each schedule has 3 targets and 2–4 windows (recurring crons with varied
minutes/hours/weekdays and durations, plus one-shot windows) in one of four
zones, two of them with DST. Prints schedules/second and the speed-up against
the brute-force minute-by-minute oracle (tests/domain/oracle.py) measured in
the same run on a sample of the same schedules, after checking that both agree
on that sample. Goal: 10,000 weekly timelines in < 5 s, and >= 100x the oracle.

    .venv/bin/python bench/evaluator.py [--schedules N] [--oracle-sample M]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.domain.evaluator import intervals
from gps_dagster.domain.spec import Schedule
from tests.domain.oracle import oracle_intervals

ZONES = ["Asia/Ho_Chi_Minh", "UTC", "America/New_York", "Europe/London"]
WEEK_START = datetime(2026, 10, 19, tzinfo=UTC)
DOWS = ["*", "1-5", "0,6", "MON-FRI", "1,3,5", "2", "SAT"]


def _window(rng: random.Random, i: int, targets: list[str]) -> dict[str, Any]:
    named = rng.sample(targets, rng.randint(1, len(targets)))
    states = []
    for t in named:
        state: dict[str, Any] = {
            "model_deploy_id": t,
            "desired_state": rng.choice(["running", "stopped"]),
        }
        if state["desired_state"] == "running" and rng.random() < 0.3:
            state["replicas"] = rng.randint(1, 3)
        states.append(state)
    base = {"name": f"w{i}", "priority": i * 10, "states": states}
    if rng.random() < 0.2:
        start = WEEK_START + timedelta(minutes=rng.randrange(0, 7 * 1440, 15))
        until = start + timedelta(minutes=rng.randrange(15, 2 * 1440, 15))
        return {
            **base,
            "kind": "one_shot",
            "active_from": start.isoformat(),
            "active_until": until.isoformat(),
        }
    cron = f"{rng.randrange(0, 60, 5)} {rng.randrange(24)} * * {rng.choice(DOWS)}"
    return {
        **base,
        "kind": "recurring",
        "cron": cron,
        "duration": f"{rng.randint(1, 20)}h{rng.choice([0, 30])}m",
    }


def make_schedule(rng: random.Random, n: int) -> Schedule:
    targets = [f"md-{n}-{k}" for k in range(3)]
    doc = {
        "name": f"bench-{n}",
        "timezone": rng.choice(ZONES),
        "targets": [
            {"model_deploy_id": t, "default_state": rng.choice(["running", "stopped"])}
            for t in targets
        ],
        "windows": [_window(rng, i, targets) for i in range(rng.randint(2, 4))],
    }
    return Schedule.model_validate(doc)


def _as_rows(s: Schedule, start: datetime, end: datetime) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: [
            (
                int(r.start.timestamp()),
                int(r.end.timestamp()) if r.end else None,
                r.intent.key,
                r.intent.source,
            )
            for r in rows
        ]
        for t, rows in intervals(s, start, end).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--oracle-sample", type=int, default=40)
    args = parser.parse_args()
    rng = random.Random(20261019)
    schedules = [make_schedule(rng, n) for n in range(args.schedules)]
    start, end = WEEK_START, WEEK_START + timedelta(days=7)

    t0 = time.perf_counter()
    total = 0
    for s in schedules:
        total += sum(len(rows) for rows in intervals(s, start, end).values())
    elapsed = time.perf_counter() - t0
    per_eval = elapsed / len(schedules)

    sample = schedules[: args.oracle_sample]
    t1 = time.perf_counter()
    expected = [oracle_intervals(s, int(start.timestamp()), int(end.timestamp())) for s in sample]
    per_oracle = (time.perf_counter() - t1) / len(sample)
    for s, want in zip(sample, expected, strict=True):
        assert _as_rows(s, start, end) == want, f"evaluator and oracle disagree on {s.name}"

    print(
        f"evaluator: {len(schedules)} weekly timelines (3 targets, 2-4 windows) in {elapsed:.2f} s "
        f"= {len(schedules) / elapsed:,.0f} schedules/s ({total} intervals)"
    )
    print(
        f"oracle (minute by minute): {1 / per_oracle:,.1f} schedules/s on a sample of {len(sample)}"
    )
    print(f"speed-up vs oracle: {per_oracle / per_eval:,.0f}x   goal: < 5 s and >= 100x")


if __name__ == "__main__":
    main()
