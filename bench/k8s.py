"""Benchmark: the Kubernetes adapter on a real control plane, 100 fake nodes × 8 GPUs, 200 deploys.

Prints, each against a baseline measured in the same run (the same number of plain ``list``
calls to the same API server, so the ratio survives a noisy machine):

* pass cost — one engine pass over 100 schedules (200 targets, nothing to do), its API calls;
* ``preview_capacity`` latency — p50/p95 over 30 previews, its API calls;
* boundary → first scale request — the engine loop woken at the boundary (wall clock), the time
  from each boundary to the first PATCH of a workload sent to the API server, p50/p95 over ≥ 10
  boundaries (goal: p95 ≤ 1 s), with the fakes running on a background thread.

``python bench/k8s.py`` starts its own control plane (``tools/k8s/build_control_plane.sh`` must
have built it) unless ``GPS_BENCH_KUBECONFIG`` names one. Sizes: ``GPS_BENCH_K8S_NODES``,
``GPS_BENCH_K8S_DEPLOYS``, ``GPS_BENCH_K8S_BOUNDARIES``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.backends.k8s import K8sCore, Kube, connect
from gps_dagster.clocks import WallClock
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.loop import production_loop
from gps_dagster.store import Store
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s.lws import install_crd
from gps_dagster.testing.k8s.pools import ClusterPool

NODES = int(os.environ.get("GPS_BENCH_K8S_NODES", "100"))
DEPLOYS = int(os.environ.get("GPS_BENCH_K8S_DEPLOYS", "200"))
BOUNDARIES = int(os.environ.get("GPS_BENCH_K8S_BOUNDARIES", "12"))
GAP_S = 4.0


class Calls:
    """Counts (and timestamps the workload PATCHes of) the adapter's HTTP requests."""

    def __init__(self, kube: Kube) -> None:
        self.count = 0
        self.patches: list[float] = []
        rest = kube.api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        if method == "PATCH" and "/deployments/" in url:
            self.patches.append(time.time())
        return self._inner(method, url, *args, **kwargs)


def pool_doc() -> dict[str, Any]:
    pairs = DEPLOYS // 2
    deploys = []
    for i in range(pairs):
        deploys.append({"id": f"d{i}-a", "gpus_per_replica": 4, "state": "running"})
        deploys.append({"id": f"d{i}-b", "gpus_per_replica": 4})
    return {
        "name": "bench-k8s",
        "nodes": [{"name": f"bench-n{j:03d}", "gpus": 8} for j in range(NODES)],
        "deploys": deploys,
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def schedule_doc(i: int, windows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    night = [
        {
            "name": "night",
            "kind": "recurring",
            "priority": 10,
            "cron": "0 22 * * *",
            "duration": "6h",
            "states": [
                {"model_deploy_id": f"d{i}-a", "desired_state": "stopped"},
                {"model_deploy_id": f"d{i}-b", "desired_state": "running"},
            ],
        }
    ]
    return {
        "name": f"s{i:04d}",
        "timezone": "UTC",
        "targets": [
            {"model_deploy_id": f"d{i}-a", "default_state": "running"},
            {"model_deploy_id": f"d{i}-b", "default_state": "stopped"},
        ],
        "windows": windows if windows is not None else night,
    }


def plain_lists(kube: Kube, namespace: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        kube.items(
            kube.core.list_namespaced_pod,
            namespace,
            label_selector="gps.dagster.io/none=1",
            what="baseline",
        )
    return time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(kubeconfig: str, db_url: str) -> None:
    admin = Kube(connect(kubeconfig, None))
    install_crd(admin)
    clock = WallClock()
    began = time.perf_counter()
    cluster = ClusterPool(admin, clock, load_pool(pool_doc()), prefix="bench").create()
    print(
        f"  pool: {NODES} nodes x 8 GPUs, {DEPLOYS} deploys ({DEPLOYS // 2} running) laid out in "
        f"{time.perf_counter() - began:.1f} s",
        flush=True,
    )
    try:
        measure(cluster, Kube(connect(kubeconfig, None)), admin, clock, db_url)
    finally:
        cluster.close()


def measure(cluster: ClusterPool, api: Kube, admin: Kube, clock: WallClock, db_url: str) -> None:
    calls = Calls(api)
    core = K8sCore(api, clock=clock, namespaces=cluster.namespaces)
    store = Store.open(db_url)
    now = clock.now()
    for i in range(DEPLOYS // 2):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=now)
    store.set_gate("enforce", now=now)
    engine = Engine(store, core, clock, EngineConfig(page_size=1000))
    engine.run_pass()  # opens the initial intervals (nothing to do)
    cluster.settle()
    times, counts = [], []
    for _ in range(5):
        before = calls.count
        start = time.perf_counter()
        engine.run_pass()
        times.append(time.perf_counter() - start)
        counts.append(calls.count - before)
    n_calls = int(statistics.median(counts))
    base = plain_lists(admin, cluster.layout.admin, n_calls)
    p = statistics.median(times)
    print(
        f"  pass over {DEPLOYS // 2} schedules ({DEPLOYS} targets): p50 {p:.3f} s, {n_calls} "
        "API calls; "
        f"baseline {n_calls} plain lists {base:.3f} s; ratio {p / base:.2f}x",
        flush=True,
    )
    previews, per = [], []
    for i in range(30):
        before = calls.count
        start = time.perf_counter()
        core.preview_capacity(f"d{i % (DEPLOYS // 2)}-b", delta_replicas=1)
        previews.append(time.perf_counter() - start)
        per.append(calls.count - before)
    n_prev = int(statistics.median(per))
    base = plain_lists(admin, cluster.layout.admin, n_prev * 30) / 30
    print(
        f"  preview_capacity: p50 {statistics.median(previews) * 1000:.0f} ms, p95 "
        f"{pct(previews, 0.95) * 1000:.0f} ms, "
        f"{n_prev} API calls; baseline {n_prev} plain lists {base * 1000:.0f} ms; "
        f"ratio {statistics.median(previews) / base:.2f}x",
        flush=True,
    )
    boundary_lag(cluster, core, store, calls, clock)
    store.engine.dispose()


def boundary_lag(
    cluster: ClusterPool, core: K8sCore, store: Store, calls: Calls, clock: WallClock
) -> None:
    """The engine loop woken at each boundary; lag = first workload PATCH − boundary."""
    first = clock.now().replace(microsecond=0) + timedelta(seconds=6)
    windows = [
        {
            "name": f"w{k}",
            "kind": "one_shot",
            "priority": 20,
            "active_from": (first + timedelta(seconds=2 * k * GAP_S)).isoformat(),
            "active_until": (first + timedelta(seconds=(2 * k + 1) * GAP_S)).isoformat(),
            "states": [
                {"model_deploy_id": "d0-a", "desired_state": "stopped", "allow_downtime": True},
                {"model_deploy_id": "d0-b", "desired_state": "running"},
            ],
        }
        for k in range((BOUNDARIES + 1) // 2)
    ]
    doc = schedule_doc(0, windows)
    store.apply_schedule(load_schedule(doc), now=clock.now())
    engine = Engine(store, core, clock, EngineConfig(pass_interval_s=30, page_size=1000))
    loop = production_loop(engine, clock=clock, interval_s=30)  # what `engine run` runs
    driver = cluster.drive(every_s=0.1)
    edges = [first + timedelta(seconds=k * GAP_S) for k in range(2 * len(windows))]
    until = edges[-1] + timedelta(seconds=GAP_S)
    stopper = threading.Timer((until - clock.now()).total_seconds(), loop.stop)
    stopper.start()
    try:
        loop.run()
    finally:
        stopper.cancel()
        driver.stop()
    lags = []
    for edge in edges:
        after = [t for t in calls.patches if t >= edge.timestamp()]
        if after:
            lags.append(after[0] - edge.timestamp())
    print(
        f"  boundary -> first scale request on the API server (woken at the boundary): "
        f"p50 {statistics.median(lags):.2f} s, p95 {pct(lags, 0.95):.2f} s, max {max(lags):.2f} s "
        f"over {len(lags)} boundaries (goal p95 <= 1 s)",
        flush=True,
    )


def main() -> None:
    print(
        "bench/k8s.py — the Kubernetes adapter on a real control plane "
        f"({datetime.now(UTC):%Y-%m-%d})",
        flush=True,
    )
    with exit_on_signals():
        kubeconfig = os.environ.get("GPS_BENCH_KUBECONFIG")
        plane = None
        tmp = Path(tempfile.mkdtemp(prefix="gps-bench-k8s-"))
        try:
            if kubeconfig is None:
                plane = cp.start()
                kubeconfig = str(plane.kubeconfig)
                print(f"  control plane started in {plane.started_s:.1f} s", flush=True)
            run(kubeconfig, f"sqlite:///{tmp / 'bench.sqlite'}")
        finally:
            with signals_held():
                if plane is not None:
                    plane.stop()


if __name__ == "__main__":
    main()
