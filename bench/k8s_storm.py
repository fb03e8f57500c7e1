"""Benchmark: fleet scale on Kubernetes — the rows of the fleet-scale table, with their baselines.

In one run, on one control plane of fake nodes (``python bench/k8s_storm.py`` starts its own —
``tools/k8s/build_control_plane.sh`` must have built it — unless ``GPS_BENCH_KUBECONFIG`` names
one; ``GPS_BENCH_ONLY=storm|rss|steady`` runs one part):

* the storm (``bench/k8s_swaps.py``): ``GPS_BENCH_SWAPS`` schedules (default 1,000) × 2
  Deployments on ``GPS_BENCH_SWAP_NODES`` fake nodes × 8 GPUs (default: as many GPUs as pairs,
  125 at 1,000 — the 100 × 8 of the table cannot hold 1,000 running 1-GPU deploys), one
  boundary → every release accepted by the API server, beside the same scale writes sent by a
  plain concurrent client (the baseline, same run); → every acquire accepted after the last
  release pod is gone; and the GPU idle of one swap on the same fleet (last pod gone → acquire
  submitted);
* the adapter's RSS with its cache at ``GPS_BENCH_RSS_PODS`` pods (default 10,000;
  ``bench/k8s_rss.py``): a fresh process before and after the cache syncs;
* API requests per steady pass (``GPS_BENCH_STORM_NODES`` nodes, default 50;
  ``GPS_BENCH_STORM_DEPLOYS`` deploys, default 200, half running): the adapter with its watch
  cache (``build_core``'s default) vs the same adapter reading every collection by LIST (the
  cache off, as before); requests and LISTs counted at each client's transport, over 5 passes
  after a warm-up. Goal: ≤ 5 requests, 0 LISTs.

* 3 engine replicas vs 1 behind 20 ms per API request (``bench/k8s_replicas.py``: a delay proxy
  on loopback, each replica its own process on one PostgreSQL store — run under
  ``tools/with_postgres.py``), on a storm of ``GPS_BENCH_REPLICA_SWAPS`` swaps (default 100: the
  size that finishes here in minutes). Goal: ≥ 2.5×.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.backends.k8s import ClusterCache, K8sCore, Kube, connect
from gps_dagster.clocks import WallClock
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s.lws import install_crd
from gps_dagster.testing.k8s.pools import ClusterPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_replicas  # bench/k8s_replicas.py: the replicas row
import k8s_rss  # bench/k8s_rss.py: the RSS row
import k8s_swaps  # bench/k8s_swaps.py: the storm rows

NODES = int(os.environ.get("GPS_BENCH_STORM_NODES", "50"))
DEPLOYS = int(os.environ.get("GPS_BENCH_STORM_DEPLOYS", "200"))
PASSES = 5
SWAPS = int(os.environ.get("GPS_BENCH_SWAPS", "1000"))
SWAP_NODES = int(os.environ.get("GPS_BENCH_SWAP_NODES", str(-(-SWAPS // 8))))
REPLICA_SWAPS = int(os.environ.get("GPS_BENCH_REPLICA_SWAPS", "100"))
ONLY = os.environ.get("GPS_BENCH_ONLY", "")
"""``steady`` / ``storm`` / ``rss`` / ``replicas``: that part alone."""


class Requests:
    """Counts a client's requests at its transport: all, and LISTs (GETs of a collection that
    are not watches)."""

    def __init__(self, kube: Kube) -> None:
        self.all = self.lists = 0
        self.listed: dict[str, int] = {}
        """LISTs by resource (the last path segment)."""
        self._lock = threading.Lock()
        rest = kube.api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        path = url.split("?", 1)[0].rstrip("/")
        query = kwargs.get("query_params", args[0] if args else None) or []
        watching = any(k == "watch" and str(v).lower() == "true" for k, v in query)
        listing = method.upper() == "GET" and not watching and _collection(path)
        with self._lock:
            self.all += 1
            self.lists += int(listing)
            if listing:
                kind = path.rsplit("/", 1)[-1]
                self.listed[kind] = self.listed.get(kind, 0) + 1
        return self._inner(method, url, *args, **kwargs)


def _collection(path: str) -> bool:
    last = path.rsplit("/", 1)[-1]
    return last in {
        "pods",
        "nodes",
        "deployments",
        "services",
        "horizontalpodautoscalers",
        "leaderworkersets",
        "resourcequotas",
        "events",
        "statefulsets",
        "daemonsets",
        "jobs",
    }


def pool_doc() -> dict[str, Any]:
    deploys = []
    for i in range(DEPLOYS // 2):
        deploys.append({"id": f"d{i}-a", "gpus_per_replica": 4, "state": "running"})
        deploys.append({"id": f"d{i}-b", "gpus_per_replica": 4})
    return {
        "name": "bench-storm",
        "nodes": [{"name": f"storm-n{j:03d}", "gpus": 8} for j in range(NODES)],
        "deploys": deploys,
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def schedule_doc(i: int) -> dict[str, Any]:
    return {
        "name": f"s{i:04d}",
        "timezone": "UTC",
        "targets": [
            {"model_deploy_id": f"d{i}-a", "default_state": "running"},
            {"model_deploy_id": f"d{i}-b", "default_state": "stopped"},
        ],
        "windows": [
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
        ],
    }


def steady_passes(
    core: K8sCore, kube_requests: Requests, db_url: str, clock: WallClock
) -> tuple[float, float, float]:
    """Median requests, LISTs and seconds per steady pass (after one warm-up pass)."""
    store = Store.open(db_url)
    now = clock.now()
    for i in range(DEPLOYS // 2):
        store.apply_schedule(load_schedule(schedule_doc(i)), now=now)
    store.set_gate("enforce", now=now)
    engine = Engine(store, core, clock, EngineConfig(page_size=1000))
    engine.run_pass()
    reqs, lists, secs = [], [], []
    for _ in range(PASSES):
        a, b = kube_requests.all, kube_requests.lists
        start = time.perf_counter()
        engine.run_pass()
        secs.append(time.perf_counter() - start)
        reqs.append(kube_requests.all - a)
        lists.append(kube_requests.lists - b)
    store.engine.dispose()
    return statistics.median(reqs), statistics.median(lists), statistics.median(secs)


def run(kubeconfig: str, tmp: Path) -> None:
    admin = Kube(connect(kubeconfig, None))
    install_crd(admin)
    rows: list[str] = []
    if ONLY in ("", "storm"):
        rows += k8s_swaps.storm(kubeconfig, admin, tmp, SWAPS, SWAP_NODES)
        print("  " + "\n  ".join(rows), flush=True)
    if ONLY in ("", "rss"):
        rows += k8s_rss.rss_rows(kubeconfig, admin)
        print("  " + rows[-1], flush=True)
    if ONLY in ("", "steady"):
        rows += steady(kubeconfig, admin, tmp)
    if ONLY in ("", "replicas"):
        rows += k8s_replicas.replica_rows(
            kubeconfig, admin, tmp, REPLICA_SWAPS, -(-REPLICA_SWAPS // 8)
        )
        print("  " + rows[-1], flush=True)
    print("\nsummary\n  " + "\n  ".join(rows), flush=True)


def steady(kubeconfig: str, admin: Kube, tmp: Path) -> list[str]:
    clock = WallClock()
    began = time.perf_counter()
    cluster = ClusterPool(admin, clock, load_pool(pool_doc()), prefix="storm").create()
    print(
        f"  pool: {NODES} nodes x 8 GPUs, {DEPLOYS} deploys ({DEPLOYS // 2} running) laid out "
        f"in {time.perf_counter() - began:.1f} s",
        flush=True,
    )
    try:
        cluster.settle()
        direct_api = Kube(connect(kubeconfig, None))
        direct = K8sCore(direct_api, clock=clock, namespaces=cluster.namespaces)
        d_req, d_list, d_s = steady_passes(
            direct, Requests(direct_api), f"sqlite:///{tmp / 'd.sqlite'}", clock
        )
        cached_api = Kube(connect(kubeconfig, None))
        counted = Requests(cached_api)
        cache = ClusterCache(cached_api, cluster.namespaces, lws=cached_api.has_lws()).start()
        cache.wait_synced(120)
        cached = K8sCore(cached_api, clock=clock, namespaces=cluster.namespaces, cache=cache)
        warm = dict(counted.listed)
        c_req, c_list, c_s = steady_passes(cached, counted, f"sqlite:///{tmp / 'c.sqlite'}", clock)
        left = {k: v - warm.get(k, 0) for k, v in counted.listed.items() if v > warm.get(k, 0)}
        n_pods = len(cache.pods() or [])
        cache.stop()
        out = [
            f"API requests per steady pass, {n_pods} pods, nothing changing: cache {c_req:.0f} "
            f"({c_list:.0f} LIST, {c_s:.3f} s) vs direct LIST {d_req:.0f} ({d_list:.0f} LIST, "
            f"{d_s:.3f} s) (goal <= 5, LIST 0)",
            f"  LISTs left with the cache, over the warm-up and {PASSES} passes: {left}",
        ]
        print("  " + "\n  ".join(out), flush=True)
        return out
    finally:
        cluster.close()


def main() -> None:
    if os.environ.get("GPS_BENCH_LOG"):  # a debugging aid: the engine's and adapter's log
        import logging

        logging.basicConfig(
            filename=os.environ["GPS_BENCH_LOG"],
            level=logging.DEBUG,
            format="%(relativeCreated)d %(threadName)s %(name)s %(message)s",
        )
    print(
        f"bench/k8s_storm.py — fleet scale on Kubernetes ({datetime.now(UTC):%Y-%m-%d})", flush=True
    )
    with exit_on_signals():
        kubeconfig = os.environ.get("GPS_BENCH_KUBECONFIG")
        plane = None
        tmp = Path(tempfile.mkdtemp(prefix="gps-bench-storm-"))
        try:
            if kubeconfig is None:
                plane = cp.start()
                kubeconfig = str(plane.kubeconfig)
                print(f"  control plane started in {plane.started_s:.1f} s", flush=True)
            run(kubeconfig, tmp)
        finally:
            with signals_held():
                if plane is not None:
                    plane.stop()


if __name__ == "__main__":
    main()
