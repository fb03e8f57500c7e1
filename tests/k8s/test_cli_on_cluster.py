"""``gps-dagster --backend kubernetes`` against the real API server: the composition root builds
the Kubernetes core from the settings, and the commands act on (and read back) the cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gps_dagster.cli.main import cli
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.testing.k8s.pools import ClusterPool, wait_quotas_counted
from tests.engine.harness import A, B, C, a_running_pool, local
from tests.k8s.cluster import kube, unique
from tests.k8s.world import rename_nodes

SEED = str(Path(__file__).parents[2] / "examples" / "seed-schedule.json")
EVENING = "2026-10-19T18:00:00+07:00"


@pytest.fixture
def cluster(k8s_cluster: str, tmp_path: Path) -> Iterator[tuple[ClusterPool, dict[str, str]]]:
    prefix = unique("cli")
    pool = ClusterPool(
        kube(),
        VirtualClock(local("2026-10-19T17:59")),
        load_pool(rename_nodes(a_running_pool(), prefix)),
        prefix=prefix,
    ).create()
    env = {
        "GPS_BACKEND": "kubernetes",
        "GPS_KUBECONFIG": k8s_cluster,
        "GPS_NAMESPACES": ",".join(pool.namespaces),
        "GPS_DB_URL": f"sqlite:///{tmp_path / 'gps.sqlite'}",
        "GPS_CLOCK": EVENING,
        "GPS_CLOCK_WRITES": "1",  # asked explicitly: act at the instant (issue 25)
    }
    yield pool, env
    pool.close()


def run(env: dict[str, str], *args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result


def replicas(pool: ClusterPool, deploy: str) -> int:
    _, ns, name = pool.workloads[deploy]
    return int(
        pool.kube.call(pool.kube.apps.read_namespaced_deployment, name, ns, what="read")["spec"][
            "replicas"
        ]
    )


def test_engine_run_on_kubernetes_stops_a_at_the_boundary_on_the_cluster(cluster: Any) -> None:
    pool, env = cluster
    run(env, "schedules", "apply", "-f", SEED)
    run(env, "gate", "enforce")
    assert replicas(pool, A) == 1
    run(env, "engine", "run", "--once")
    assert replicas(pool, A) == 0 and replicas(pool, B) == 0  # released first; B waits for capacity
    assert replicas(pool, C) == 1
    status = json.loads(run(env, "status", "--format", "json").output)
    phases = {r["target"]: r["phase"] for r in status["targets"]}
    assert phases[A] == "releasing" and phases[B] in ("pending", "capacity_wait")
    assert status["gate"] == "enforce"


def test_pool_show_lists_the_clusters_nodes_gpus_and_pods(cluster: Any) -> None:
    pool, env = cluster
    text = run(env, "pool", "show").output
    for node in pool.sim.nodes:
        assert node in text
    assert A in text and C in text and "GPU-" in text
    data = json.loads(
        run(env, "pool", "show", "--backend", "kubernetes", "--format", "json").output
    )
    ours = {n["name"]: n for n in data["nodes"] if n["name"] in pool.sim.nodes}
    assert sum(n["capacity"] for n in ours.values()) == 10
    assert sum(n["requested"] for n in ours.values()) == 10  # A (8) + C (2)
    held = {p["deploy"]: p["gpus"] for n in ours.values() for p in n["pods"]}
    assert held == {A: 8, C: 2}


def test_pool_describe_reads_back_a_refusal_in_the_api_servers_words(cluster: Any) -> None:
    """A Deployment the ResourceQuota refuses: the ReplicaSet's FailedCreate, quoted."""
    pool, env = cluster
    _, ns, name = pool.workloads[B]
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "tight"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "1"}},
    }
    pool.kube.call(
        pool.kube.core.create_namespaced_resource_quota, ns, quota, what="quota", mutating=True
    )
    wait_quotas_counted(pool.kube, [ns])
    pool.kube.merge_patch(
        pool.kube.apps.patch_namespaced_deployment,
        name,
        ns,
        body={"spec": {"replicas": 1}},
        what="scale B by hand",
    )
    text = ""
    for _ in range(100):  # the ReplicaSet controller reports the refusal within milliseconds
        text = run(env, "pool", "describe", B).output
        if "exceeded quota" in text:
            break
    assert "FailedCreate" in text and "exceeded quota: tight" in text
    data = json.loads(run(env, "pool", "describe", C, "--format", "json").output)
    assert data["deploy"] == C and [p["gpus"] for p in data["pods"]] == [2]
