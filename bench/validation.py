"""Benchmark: schedule validation over the fixed 33-year span (R-MODEL-3/5), cold caches.

Three figures, each against a baseline measured in the same run, the naive
way of answering the same question (every fire of the span enumerated with
``CronExpr.fire_epochs``, occurrence lists merged):

1. every example schedule, validated cold (a fresh CLI process);
2. a dense pair (``* * * * *`` and ``30 * * * *``, equal priority, disagreeing):
   17 million fires in the span for the baseline;
3. the largest schedule allowed: ``MAX_WINDOWS`` equal-priority windows that
   disagree and never meet, in a DST zone (every pair compared). The baseline
   is timed on a sample of pairs and extrapolated.

    .venv/bin/python bench/validation.py [--sample-pairs N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.domain import crons, occurrences, patterns
from gps_dagster.domain.crons import parse_cron
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import MAX_WINDOWS

ROOT = Path(__file__).resolve().parents[1]
NY = "America/New_York"


def cold() -> None:
    """Forget every cache a CLI process would start without."""
    for fn in (
        patterns.day_bits,
        patterns.min_gap,
        patterns._near,
        patterns._zone,
        patterns._calendar,
        crons._parse,
    ):
        fn.cache_clear()
    crons._DAY_CACHE.clear()
    crons._KEEP.clear()
    occurrences._CACHE.clear()


def timed(fn: Any) -> float:
    cold()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def span(zone: str) -> tuple[int, int]:
    tz = ZoneInfo(zone)
    return (
        int(datetime(patterns.SPAN_START.year, 1, 1, tzinfo=tz).timestamp()),
        int(datetime(patterns.SPAN_END.year, 1, 1, tzinfo=tz).timestamp()),
    )


def naive_window(cron: str, duration: int, zone: str) -> tuple[int | None, list[tuple[int, int]]]:
    """Shortest gap and occurrence list, by enumerating every fire of the span."""
    fires = parse_cron(cron).fire_epochs(ZoneInfo(zone), *span(zone))
    gap = min((b - a for a, b in itertools.pairwise(fires)), default=None)
    return gap, [(f, f + duration) for f in fires]


def naive_windows(doc: dict[str, Any]) -> list[tuple[dict[str, Any], list[tuple[int, int]]]]:
    """Every recurring window's occurrences over the span (its shortest gap checked on the way)."""
    out = []
    for w in doc["windows"]:
        if w["kind"] == "recurring":
            _, occurrences = naive_window(
                w["cron"], int(load_duration(w["duration"])), doc["timezone"]
            )
            out.append((w, occurrences))
    return out


def naive_pairs(compiled: list[Any], pairs: list[tuple[int, int]]) -> int:
    """Merge the occurrence lists of every equal-priority pair; count the clashes."""
    clashes = 0
    for i, j in pairs:
        (a, xs), (b, ys) = compiled[i], compiled[j]
        if a["priority"] == b["priority"] and patterns.first_common(xs, ys) is not None:
            clashes += 1
    return clashes


def naive_check(doc: dict[str, Any]) -> int:
    """The baseline: every recurring window enumerated, every pair merged."""
    compiled = naive_windows(doc)
    return naive_pairs(compiled, list(itertools.combinations(range(len(compiled)), 2)))


def load_duration(text: str) -> float:
    from gps_dagster.domain.spec import parse_duration

    return parse_duration(text).total_seconds()


def window(name: str, cron: str, duration: str, state: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "recurring",
        "priority": 10,
        "cron": cron,
        "duration": duration,
        "states": [{"model_deploy_id": "a", "desired_state": state}],
    }


def schedule(windows: list[dict[str, Any]], zone: str = NY) -> dict[str, Any]:
    return {
        "name": "bench",
        "timezone": zone,
        "targets": [{"model_deploy_id": "a", "default_state": "stopped"}],
        "windows": windows,
    }


def examples() -> None:
    for path in sorted((ROOT / "examples").glob("*schedule*.json")):
        doc = json.loads(path.read_text())
        ours = timed(lambda doc=doc: load_schedule(doc))
        naive = timed(lambda doc=doc: naive_check(doc))
        print(
            f"  {path.name:28} {ours * 1000:8.1f} ms   naive {naive * 1000:9.1f} ms   "
            f"{naive / ours:6.1f}x"
        )


def dense() -> None:
    doc = schedule(
        [
            window("every-minute", "* * * * *", "1m", "running"),
            window("on-the-half", "30 * * * *", "1m", "stopped"),
        ]
    )
    ours = timed(lambda: _refused(doc))
    naive = timed(lambda: naive_check(doc))
    print(
        f"  dense pair (17M fires)       {ours * 1000:8.1f} ms   naive {naive * 1000:9.1f} ms   "
        f"{naive / ours:6.1f}x"
    )


def _refused(doc: dict[str, Any]) -> None:
    from gps_dagster.domain.errors import SpecInvalid

    try:
        load_schedule(doc)
    except SpecInvalid as exc:
        assert exc.reasons == ("ambiguous_priority",)
        return
    raise AssertionError("the dense pair must clash")


def largest(sample: int) -> None:
    windows = [
        window(f"w{i}", f"{i % 60} {i // 60 * 3} * * *", "1m", "running" if i % 2 else "stopped")
        for i in range(MAX_WINDOWS)
    ]
    doc = schedule(windows)
    pairs = MAX_WINDOWS * (MAX_WINDOWS - 1) // 2
    ours = timed(lambda: load_schedule(doc))
    chosen = list(itertools.combinations(range(MAX_WINDOWS), 2))[:: max(1, pairs // sample)][
        :sample
    ]
    cold()
    start = time.perf_counter()
    compiled = naive_windows(doc)
    enumerated = time.perf_counter() - start
    merged = timed(lambda: naive_pairs(compiled, chosen)) / len(chosen) * pairs
    naive = enumerated + merged
    print(
        f"  {MAX_WINDOWS} windows ({pairs:,} pairs)  {ours:8.2f} s    naive {naive:9.1f} s "
        f"(enumeration {enumerated:.1f} s + merges extrapolated from {len(chosen)} pairs)   "
        f"{naive / ours:6.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample-pairs", type=int, default=40)
    args = parser.parse_args()
    print(
        f"validation over {patterns.SPAN_START}..{patterns.SPAN_END} (cold caches), "
        "ours vs naive enumeration"
    )
    examples()
    dense()
    largest(args.sample_pairs)


if __name__ == "__main__":
    main()
