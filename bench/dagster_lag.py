"""Boundary → op lag under the real ``dagster dev``: queued vs immediate run coordinator.

For each coordinator a fresh ``dagster dev`` serves a schedule whose window
opens every minute at :00 (a cron boundary schedule fires) and closes at :30
(no cron can say ":30": the boundary sensor serves it), over the demo pool
with zero simulated delays, so only the Dagster path is measured. For every
boundary reached after the server is up, the lag is the op's STEP_START
(read back through GraphQL) minus the boundary instant (the run's
``gps/interval`` tag):

* boundary → first release op started (goal: p95 ≤ 10 s on a 2-core machine;
  the seed's 30-second engine pass alone allows 30 s);
* boundary → first acquire op started.

Usage: ``python bench/dagster_lag.py [--boundaries 10] [--coordinator queued|queued-1s|immediate|all]``.
Results are printed and written to ``var/bench/dagster_lag-<coordinator>.json``.
The whole run takes ~6 minutes per coordinator (10 boundaries, 30 s apart).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from gps_dagster.cli.devserver import (
    REPO,
    DagsterDev,
    free_port,
    prepare_home,
    seed_database,
)
from gps_dagster.cli.teardown import exit_on_signals, signals_held
from gps_dagster.dagster_defs import names

COORDINATORS: dict[str, dict[str, Any]] = {
    "queued": {"class": "QueuedRunCoordinator", "config": {}},  # Dagster's default dequeue interval
    "queued-1s": {"class": "QueuedRunCoordinator", "config": {"dequeue_interval_seconds": 1}},  # dagster.yaml
    "immediate": {"class": "DefaultRunCoordinator"},
}
SCHEDULE = {
    "name": "bench-lag",
    "timezone": "UTC",
    "targets": [
        {"model_deploy_id": "md-llama70b", "default_state": "stopped", "default_allow_downtime": True},
        {"model_deploy_id": "md-qwen32b", "default_state": "running"},
    ],
    "windows": [
        {
            "name": "every-minute", "kind": "recurring", "priority": 10, "cron": "* * * * *", "duration": "30s",
            "states": [
                {"model_deploy_id": "md-llama70b", "desired_state": "running"},
                {"model_deploy_id": "md-qwen32b", "desired_state": "stopped"},
            ],
        }
    ],
}


def instance_yaml(coordinator: str) -> str:
    doc = yaml.safe_load((REPO / "dagster.yaml").read_text())
    doc["run_coordinator"] = {"module": "dagster.core.run_coordinator", **COORDINATORS[coordinator]}
    return yaml.safe_dump(doc)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def lags(runs: list[dict[str, Any]], since: datetime) -> dict[str, dict[str, Any]]:
    """Per boundary (interval start): first release / acquire op start, and the trigger."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        interval = tags.get(names.TAG_INTERVAL)
        if not interval or datetime.fromisoformat(interval) < since:
            continue
        at = datetime.fromisoformat(interval).timestamp()
        row = out.setdefault(interval, {"trigger": None, "release": None, "acquire": None})
        if tags.get(names.TAG_PHASE) == "plan":
            row["trigger"] = tags.get(names.TAG_TRIGGER)
        for step in run["stepStats"]:
            kind = step["stepKey"].split("[", 1)[0]
            if kind in ("release", "acquire") and step["startTime"]:
                lag = step["startTime"] - at
                row[kind] = lag if row[kind] is None else min(row[kind], lag)
    return out


def measure(coordinator: str, boundaries: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"gps-lag-{coordinator}-"))
    pool = yaml.safe_load((REPO / "examples" / "demo-pool.yaml").read_text())
    pool["sim"]["timings"] = {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}
    (root / "pool.yaml").write_text(yaml.safe_dump(pool))
    (root / "schedule.json").write_text(json.dumps(SCHEDULE))
    db_url = f"sqlite:///{root / 'gps.sqlite'}"
    seed_database(db_url, pool_file=root / "pool.yaml", schedule_files=[root / "schedule.json"])
    home = prepare_home(root / "dagster_home")
    (home / "dagster.yaml").write_text(instance_yaml(coordinator))
    env = {"GPS_DB_URL": db_url, "GPS_POOL_FILE": str(root / "pool.yaml")}
    dev = DagsterDev(dagster_home=home, env=env, port=free_port())
    dev.start()
    try:
        assert dev.proc is not None
        print(f"[{coordinator}] dagster dev started (process group {dev.proc.pid})", flush=True)
        dev.wait_ready(timeout=180)
        since = datetime.now(UTC)
        print(f"[{coordinator}] dagster dev up; waiting for {boundaries} boundaries ...", flush=True)
        deadline = time.monotonic() + 45 * boundaries + 120
        rows: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            time.sleep(5)
            rows = lags(dev.runs_by_tag(names.TAG_SCHEDULE, SCHEDULE["name"]), since)
            complete = [r for r in rows.values() if r["release"] is not None and r["acquire"] is not None]
            if len(complete) >= boundaries:
                break
    finally:
        with signals_held():
            left = dev.stop()
            shutil.rmtree(root, ignore_errors=True)
    done = {k: v for k, v in sorted(rows.items()) if v["release"] is not None and v["acquire"] is not None}
    release = [v["release"] for v in done.values()]
    acquire = [v["acquire"] for v in done.values()]
    return {
        "coordinator": coordinator,
        "boundaries": len(done),
        "release_p50": percentile(release, 0.5), "release_p95": percentile(release, 0.95), "release_max": max(release, default=float("nan")),
        "acquire_p50": percentile(acquire, 0.5), "acquire_p95": percentile(acquire, 0.95), "acquire_max": max(acquire, default=float("nan")),
        "by_trigger": {
            t: statistics.median([v["release"] for v in done.values() if v["trigger"] == t])
            for t in sorted({str(v["trigger"]) for v in done.values()})
            if any(v["trigger"] == t for v in done.values())
        },
        "rows": done,
        "left_processes": left,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--boundaries", type=int, default=10)
    parser.add_argument("--coordinator", choices=[*COORDINATORS, "all"], default="all")
    args = parser.parse_args(argv)
    chosen = list(COORDINATORS) if args.coordinator == "all" else [args.coordinator]
    with exit_on_signals():  # SIGTERM/SIGHUP too: dagster dev is always stopped
        results = [measure(c, args.boundaries) for c in chosen]
    print(f"\n{'coordinator':12} {'n':>3} {'release p50':>12} {'p95':>7} {'max':>7} {'acquire p50':>12} {'p95':>7} {'max':>7}  release p50 by trigger")
    for r in results:
        by = ", ".join(f"{k}={v:.1f}s" for k, v in r["by_trigger"].items())
        print(f"{r['coordinator']:12} {r['boundaries']:>3} {r['release_p50']:>11.1f}s {r['release_p95']:>6.1f}s {r['release_max']:>6.1f}s "
              f"{r['acquire_p50']:>11.1f}s {r['acquire_p95']:>6.1f}s {r['acquire_max']:>6.1f}s  {by}")
    out = REPO / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        (out / f"dagster_lag-{r['coordinator']}.json").write_text(json.dumps(r, indent=2, default=str))
    print(f"goal: release p95 <= 10 s; results in {out}/dagster_lag-<coordinator>.json")
    ok = all(r["boundaries"] >= args.boundaries and r["release_p95"] <= 10 for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
