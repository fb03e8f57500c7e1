"""The adapter's RSS with its watch cache at 10,000 pods (a row of ``bench/k8s_storm.py``).

``GPS_BENCH_RSS_PODS`` pods (default 10,000) are created in a namespace of their own, never
scheduled (``schedulerName`` of no scheduler: the fake cluster does not have to run them), each as
a tenant's serving pod looks in its spec and metadata (labels, annotations, two containers with
environment and resource requests; the JSON size per pod is printed). A fresh process (spawned:
nothing of the bench's own caches in it) imports the adapter and opens its client — the baseline —
then starts ``ClusterCache`` (every informer: nodes, pods cluster-wide, the namespace's workloads)
and waits for it to sync: RSS after minus RSS before is the figure; the peak (``VmHWM``) is
printed beside it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gps_dagster.backends.k8s import Kube, connect, names
from gps_dagster.ports import CoreError
from gps_dagster.testing.k8s.pools import wait_default_tokens

PODS = int(os.environ.get("GPS_BENCH_RSS_PODS", "10000"))


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pod_body(i: int) -> dict[str, Any]:
    env = [{"name": f"SETTING_{k}", "value": f"value-{k}-{i}"} for k in range(6)]
    res = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"tenant-{i:05d}",
            "labels": {
                "app": f"svc-{i % 500}",
                "tier": "serving",
                "team": f"t{i % 40}",
                names.DEPLOY_ID: f"rss-d{i}",
                "pod-template-hash": "5d8f7c9b4",
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "example.com/owner": f"team-{i % 40}@example.com",
            },
        },
        "spec": {
            "schedulerName": "gps-bench-no-scheduler",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "serve",
                    "image": "registry.example.com/serve:1.2.3",
                    "env": env,
                    "ports": [{"containerPort": 8000}],
                    "resources": res,
                },
                {"name": "sidecar", "image": "registry.example.com/proxy:4.5", "resources": res},
            ],
        },
    }


def measure(kubeconfig: str, namespace: str, out: Any) -> None:
    """In a fresh process: RSS with the client only, then with the synced cache."""
    from gps_dagster.backends.k8s import ClusterCache

    kube = Kube(connect(kubeconfig, None))
    kube.call(kube.core.list_namespaced_pod, namespace, limit=1, what="warm the client")
    gc.collect()
    before = status_mb("VmRSS")
    start = time.perf_counter()
    cache = ClusterCache(kube, (namespace,), lws=False).start()
    synced = cache.wait_synced(900)
    took = time.perf_counter() - start
    pods = len(cache.pods() or [])
    gc.collect()
    after = status_mb("VmRSS")
    out.put(
        {
            "before": before,
            "after": after,
            "peak": status_mb("VmHWM"),
            "pods": pods,
            "synced": synced,
            "took": took,
        }
    )
    cache.stop()


def rss_rows(kubeconfig: str, admin: Kube) -> list[str]:
    ns = f"rss-bench-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    admin.call(admin.core.create_namespace, body, what="create namespace", mutating=True)
    try:
        wait_default_tokens(admin, [ns])
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(
                pool.map(
                    lambda i: admin.call(
                        admin.core.create_namespaced_pod,
                        ns,
                        pod_body(i),
                        what="create pod",
                        mutating=True,
                    ),
                    range(PODS),
                )
            )
        made = time.perf_counter() - start
        sample = admin.call(admin.core.read_namespaced_pod, "tenant-00000", ns, what="read")
        size = len(json.dumps(sample))
        print(
            f"  RSS: {PODS:,} pods created in {made:.0f} s ({size} bytes of JSON each)", flush=True
        )
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        proc = ctx.Process(target=measure, args=(kubeconfig, ns, out))
        proc.start()
        got = out.get(timeout=1200)
        proc.join(timeout=120)
    finally:  # the namespace goes with its pods, in the background (a bulk delete of 10,000
        # pods outlasts the client's read timeout on a loaded machine)
        with contextlib.suppress(CoreError):
            admin.call(admin.core.delete_namespace, ns, what="delete namespace", mutating=True)
    delta = got["after"] - got["before"]
    return [
        f"adapter RSS with the cache at {got['pods']:,} pods: +{delta:.0f} MB over the process "
        f"before the cache ({got['before']:.0f} -> {got['after']:.0f} MB, "
        f"peak {got['peak']:.0f} MB;"
        f" synced {got['synced']} in {got['took']:.1f} s) (goal <= 300 MB)"
    ]
