"""``gps-dagster --backend kubernetes`` against the real API server: the composition root builds
the Kubernetes core from the settings, and the commands act on (and read back) the cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gps_dagster.cli.main import cli
from gps_dagster.clocks import VirtualClock, WallClock
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


def _window_around_the_wall_clock(tmp_path: Path) -> Path:
    """The seed, with its one-shot window (A stopped with downtime, B running) in force from a
    minute ago to an hour ahead of the wall clock: the only schedule whose outcome is the same at
    any real instant, so a process on the wall clock has something to do whenever it runs."""
    doc = json.loads(Path(SEED).read_text())
    now = datetime.now(UTC).replace(microsecond=0)  # the process under test reads this clock too
    (maint,) = (w for w in doc["windows"] if w["kind"] == "one_shot")
    maint["active_from"] = (now - timedelta(minutes=1)).isoformat()
    maint["active_until"] = (now + timedelta(hours=1)).isoformat()
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(doc))
    return path


def test_engine_run_as_its_own_process_swaps_a_for_b_while_the_cluster_moves(
    cluster: Any, tmp_path: Path
) -> None:
    """The production shape: ``gps-dagster engine run`` is a process of its own on the wall clock
    (it refuses a frozen GPS_CLOCK: no boundary would come), looping on its interval with no test
    code between its passes. It releases A, sees A's pods go at the kubelet's pace, starts B when
    the GPUs are free, and stops cleanly at SIGTERM."""
    # Its own pool on the wall clock, its fakes driven on a thread: nothing steps them for it.
    # The seed's timings are minutes of model start (start_delay_s 120, publish_lag_s 60); on the
    # wall clock they are seconds, so the run is about the loop, not about waiting.
    prefix = unique("clw")
    doc = rename_nodes(a_running_pool(), prefix)
    doc["sim"]["timings"] = {"stop_grace_s": 1, "publish_lag_s": 1, "start_delay_s": 2}
    pool = ClusterPool(kube(), WallClock(), load_pool(doc), prefix=prefix).create()
    driver = pool.drive(every_s=0.2)
    env = {**cluster[1], "GPS_NAMESPACES": ",".join(pool.namespaces)}
    try:
        _engine_process_swaps(pool, env, tmp_path)
    finally:
        driver.stop()
        pool.close()


def _engine_process_swaps(pool: ClusterPool, env: dict[str, str], tmp_path: Path) -> None:
    run(env, "schedules", "apply", "-f", str(_window_around_the_wall_clock(tmp_path)))
    run(env, "gate", "enforce")
    wall = {k: v for k, v in env.items() if not k.startswith("GPS_CLOCK")}
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPS_CLOCK")}
    log = (tmp_path / "engine.err").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gps_dagster.cli.main", "engine", "run", "--interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env={**base, **wall, "PYTHONUNBUFFERED": "1"},
        cwd=tmp_path,
    )
    phases: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 180  # a bound on a hang, not a timing: it ends on state
        while time.monotonic() < deadline and proc.poll() is None:
            status = json.loads(run(wall, "status", "--format", "json").output)
            phases = {r["target"]: r["phase"] for r in status["targets"]}
            if phases.get(B) == "converged" and replicas(pool, B) == 1:
                break
            time.sleep(0.5)
        assert proc.poll() is None, (tmp_path / "engine.err").read_text()
        # mutations: B started before A's GPUs are free (start_unschedulable), or no loop at all
        assert phases.get(B) == "converged", (phases, (tmp_path / "engine.err").read_text())
        assert replicas(pool, A) == 0 and replicas(pool, B) == 1 and replicas(pool, C) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "engine.err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    err = (tmp_path / "engine.err").read_text()
    assert "stopped" in err and "Traceback" not in err, err
