"""Runs launched as Kubernetes Jobs through the chart (SPEC R-DAG-7, R-K8S-6; issue 11).

``tests/helm/jobs_world.py`` installs the chart on the test control plane and runs ``dagster
dev`` with the chart's own dagster.yaml (K8sRunLauncher, PostgreSQL); the reconcile sensor
launches the transition run, the daemon launches it as a Job, and the fake kubelet executes the
Job's pod as a local process with the pod's env. The test asserts the run succeeded in the
Dagster instance, that its ops acted on the cluster (B scaled to 0, then A to its replicas)
through the adapter's ServiceAccount, what the Job's pod carried, and that the TTL controller
removed the Job afterwards. Wall clock: Dagster's daemon and sensors run in real time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gps_dagster.backends.k8s import ledger
from gps_dagster.backends.k8s.workloads import read
from gps_dagster.clocks import WallClock
from gps_dagster.dagster_defs import names
from tests.helm.jobs_world import SCHEDULE, A, B, JobsWorld, jobs_world

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.xdist_group(name="jobs")]


def _wait(what: str, check, world: JobsWorld, timeout: float = 240.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    logs = "\n".join(
        f"--- {r.name} (exit {r.exit_code})\n{r.log()[-3000:]}" for r in world.run_pods()
    )
    raise AssertionError(f"{what} not reached in {timeout:.0f} s\n{world.dev.log_tail(60)}\n{logs}")


def test_a_transition_run_is_a_kubernetes_job_that_scales_the_deployments(
    k8s_cluster: str, pg_url: str, tmp_path: Path
) -> None:
    with jobs_world(k8s_cluster, pg_url, tmp_path, WallClock()) as w:
        runs = _wait(
            "a successful transition run",
            lambda: [
                r
                for r in w.dev.runs_by_tag(names.TAG_SCHEDULE, SCHEDULE)
                if r["status"] == "SUCCESS"
            ],
            w,
        )
        assert {r["jobName"] for r in runs} == {names.TRANSITION_JOB}
        # the run worker was the Job's pod, executed with the pod's own env and identity
        pods = _wait(
            "the run worker's pod exited 0",
            lambda: [r for r in w.run_pods() if r.exit_code == 0],
            w,
        )
        worker = pods[0]
        assert worker.spec.argv[1:3] == ("api", "execute_run")
        assert worker.image == "gps-dagster:test"
        env = worker.spec.env
        assert env["GPS_BACKEND"] == "kubernetes" and env["GPS_DB_URL"] == pg_url
        assert env["GPS_NAMESPACES"] == ",".join(w.pool.namespaces)
        assert "KUBECONFIG" in env and "GPS_KUBECONFIG" not in env  # its ServiceAccount's token
        # its release and acquire ops acted on the cluster's workloads
        assert _wait(
            "B stopped and A started", lambda: w.replicas(B) == 0 and w.replicas(A) == 1, w
        )
        kind, ns, name = w.pool.workloads[B]
        entries = ledger.read(read(w.pool.kube, kind, ns, name)).entries
        assert [e.kind for e in entries][-1] == "stop"

        def steps() -> dict[tuple[str, str], str]:
            return {(a.deploy_id, a.step): a.state for a in w.store.list_actions()}

        assert _wait("both steps converged", lambda: set(steps().values()) == {"converged"}, w)
        assert set(steps()) == {(B, "stop"), (A, "start")}
        # the finished Job is deleted by the TTL controller (ttlSecondsAfterFinished), pods too
        assert _wait(
            "the finished run Jobs deleted by their TTL", lambda: w.run_jobs() == [], w, timeout=90
        )
