"""Runs launched as Kubernetes Jobs: the chart installed, Dagster launching through it.

What runs where, on the test control plane and this machine:

* a GPU pool on fake nodes (``ClusterPool``, wall clock): A (8 GPUs, stopped) and B (8 GPUs,
  running) as real Deployments labelled with their deploy ids, on one 8-GPU node — A can only
  start once B released its GPUs;
* the chart, installed with ``helm install --wait`` (full mode; the adapter scoped to the pool's
  namespaces): its ServiceAccounts, RBAC, dagster.yaml ConfigMap, env ConfigMap;
* ``dagster dev`` standing for the webserver + daemon: its dagster.yaml is the chart's
  ConfigMap as installed (the only difference: ``loadInclusterConfig: false`` with a kubeconfig
  file, in the values), its run launcher acts as the chart's run-launcher ServiceAccount, and
  its code location (``definitions.py``) as the adapter's — both through kubeconfigs made
  from their token Secrets, so RBAC applies exactly as in the cluster;
* every transition run: the daemon's ``K8sRunLauncher`` creates a Job; the scheduler binds its
  pod to the ``ProductNode``, whose fake kubelet runs the pod's command (``dagster api
  execute_run …``) as a local process with the pod's env (the database URL from the Secret,
  GPS_BACKEND=kubernetes from the ConfigMap, the adapter's token): its release and acquire ops
  scale the Deployments; the pod's phase follows the exit code, the TTL controller deletes the
  finished Job.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gps_dagster.demo.devserver import REPO, DagsterDev, free_port
from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.ports import Clock
from gps_dagster.store import Store
from gps_dagster.testing.k8s.hosts import service_account_kubeconfig
from gps_dagster.testing.k8s.pools import ClusterPool, Driver
from tests.helm.chart_cluster import ChartRelease

SCHEDULE = "jobs-swap"
A, B = "md-a", "md-b"


def pool_text(node: str) -> str:
    return f"""
name: jobs-pool
nodes:
  - {{name: {node}, gpus: 8, flavor: H100-80GB, region: r1}}
deploys:
  - {{id: {A}, kind: deployment, gpus_per_replica: 8, state: stopped}}
  - {{id: {B}, kind: deployment, gpus_per_replica: 8, state: running}}
sim:
  timings: {{stop_grace_s: 1, publish_lag_s: 0, start_delay_s: 1}}
"""


def schedule(window_from: datetime, window_to: datetime) -> dict[str, Any]:
    """A stopped and B running by default; a one-shot window swaps them."""
    return {
        "name": SCHEDULE,
        "timezone": "UTC",
        "targets": [
            {"model_deploy_id": A, "default_state": "stopped", "default_allow_downtime": True},
            {"model_deploy_id": B, "default_state": "running", "default_allow_downtime": True},
        ],
        "windows": [
            {
                "name": "swap",
                "kind": "one_shot",
                "priority": 10,
                "active_from": window_from.isoformat(),
                "active_until": window_to.isoformat(),
                "states": [
                    {"model_deploy_id": A, "desired_state": "running"},
                    {"model_deploy_id": B, "desired_state": "stopped"},
                ],
            }
        ],
    }


@dataclass
class JobsWorld:
    release: ChartRelease
    pool: ClusterPool
    dev: DagsterDev
    store: Store
    clock: Clock

    def replicas(self, deploy: str) -> int:
        _, ns, name = self.pool.workloads[deploy]
        obj = self.pool.kube.call(
            self.pool.kube.apps.read_namespaced_deployment, name, ns, what="deployment"
        )
        return int(obj["spec"].get("replicas") or 0)

    def run_jobs(self) -> list[dict[str, Any]]:
        return self.release.kube.items(
            self.release.kube.batch.list_namespaced_job,
            self.release.namespace,
            label_selector="app.kubernetes.io/component=run_worker",
            what="run jobs",
        )

    def run_pods(self) -> list[Any]:
        return [
            r for r in self.release.node.runner.runs.values() if r.name.startswith("dagster-run-")
        ]

    def apply(self, spec: dict[str, Any]) -> None:
        self.store.apply_schedule(parse_schedule(json.dumps(spec)), now=self.clock.now())


@contextlib.contextmanager
def jobs_world(
    kubeconfig: str,
    pg_url: str,
    root: Path,
    clock: Clock,
    *,
    first: dict[str, Any] | None = None,
    k8s_launcher: bool = True,
    definitions: Path | None = None,
) -> Iterator[JobsWorld]:
    """The world of the module docstring; ``first`` is the schedule applied before Dagster starts
    (default: the swap window open since 10 minutes). ``k8s_launcher=False`` drops the run
    launcher from the installed dagster.yaml (Dagster's default: a local subprocess per run),
    the baseline the benchmark compares the Job path with. ``definitions``: the code location
    ``dagster dev`` serves (default: the repository's ``definitions.py``)."""
    suffix = uuid.uuid4().hex[:6]
    spec = parse_pool(pool_text(f"jobs-{suffix}-gpu"))
    release = ChartRelease(kubeconfig, pg_url, root, clock=clock)
    pool = ClusterPool(release.kube, clock, spec, prefix=f"jobs{suffix}")
    driver: Driver | None = None
    dev: DagsterDev | None = None
    store = Store.open(pg_url)
    try:
        pool.create()
        driver = pool.drive(every_s=0.2)
        release.scope = pool.namespaces
        release.start()
        launcher_kubeconfig = root / "run-launcher.kubeconfig"
        values = release.values(
            engine={"enabled": False},
            api={"enabled": False},
            runLauncher={
                "config": {
                    "k8sRunLauncher": {
                        "loadInclusterConfig": False,
                        "kubeconfigFile": str(launcher_kubeconfig),
                    }
                }
            },
        )
        release.install(values)
        service_account_kubeconfig(
            release.kube,
            release.namespace,
            f"{release.fullname}-run-launcher",
            launcher_kubeconfig,
            cluster=release.cluster,
        )
        adapter = service_account_kubeconfig(
            release.kube,
            release.namespace,
            f"{release.fullname}-runs",
            root / "adapter.kubeconfig",
            cluster=release.cluster,
        )
        home = root / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text(_installed_instance(release, k8s_launcher))
        now = clock.now()
        first = first or schedule(now - timedelta(minutes=10), now + timedelta(hours=2))
        store.apply_schedule(parse_schedule(json.dumps(first)), now=now)
        store.set_gate("enforce", now=now)
        env = {
            "DAGSTER_PG_URL": pg_url,
            "GPS_DB_URL": pg_url,
            "GPS_BACKEND": "kubernetes",
            "GPS_KUBECONFIG": str(adapter),
            "GPS_NAMESPACES": ",".join(pool.namespaces),
            "GPS_RECONCILE_INTERVAL_S": "5",
        }
        dev = DagsterDev(
            dagster_home=home, env=env, port=free_port(), cwd=REPO, definitions=definitions
        )
        dev.start()
        dev.wait_ready(timeout=180)
        yield JobsWorld(release, pool, dev, store, clock)
    finally:
        if dev is not None:
            dev.stop()
        release.close()
        if driver is not None:
            driver.stop()
        pool.close()
        store.engine.dispose()


def _installed_instance(release: ChartRelease, k8s_launcher: bool) -> str:
    cm = release.kube.call(
        release.kube.core.read_namespaced_config_map,
        f"{release.fullname}-instance",
        release.namespace,
        what="instance configmap",
    )
    text = str(cm["data"]["dagster.yaml"])
    doc = yaml.safe_load(text)  # as installed, parsed here so a broken file fails early
    if k8s_launcher:
        return text
    doc.pop("run_launcher")
    return str(yaml.safe_dump(doc))
