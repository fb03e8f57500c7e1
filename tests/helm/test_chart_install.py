"""``helm install --wait``, ``upgrade``, ``rollback``, ``uninstall`` on the real control plane.

The fake kubelet (``ProductNode``) marks the Deployments' pods Running/Ready — a pod that needs
a container image cannot really run here — and *executes* the Job pods: so the migration hook
really runs ``gps-dagster db upgrade`` against a fresh PostgreSQL database through the URL in
the Secret, and the token hook really registers the generated admin token. What the install
proves beyond "helm said ok":

* the hooks' effects in the database (Alembic's version table in schema ``gps``, a token that
  verifies), their pods gone after success;
* the objects the API server accepted (RBAC rules equal to rbac.yaml's, the pods'
  ServiceAccounts), and three of them run for real from what the API server holds: the engine
  pod's container (command, env from the Secret and the ConfigMap, the adapter's token) serves
  ``/metrics``; the API pod's answers an admin request with the Secret's token; the code
  location's ``dagster api grpc`` passes its own readiness probe command;
* upgrade (replicas, the hook again, the token kept), rollback, uninstall (nothing left).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from gps_dagster.backends.k8s import rbac
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.tokens import TokenRepository
from gps_dagster.testing.k8s.runner import PodRun
from tests.helm.chart_cluster import ChartRelease
from tests.helm.helm_support import CHART

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def release(k8s_cluster: str, pg_url: str, tmp_path: Path) -> Iterator[ChartRelease]:
    rel = ChartRelease(k8s_cluster, pg_url, tmp_path).start()
    try:
        yield rel
    finally:
        rel.close()


def _wait_http(
    url: str, run: PodRun, *, headers: dict[str, str] | None = None, timeout: float = 90
) -> str:
    """The body of a 200 from ``url`` served by ``run`` (fails with its log if it died)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if run.proc is not None and run.proc.poll() is not None:
            raise AssertionError(f"{run.name} exited {run.proc.returncode}:\n{run.log()[-3000:]}")
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=5) as resp:
                return str(resp.read().decode())
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    raise AssertionError(f"{url} never answered: {last}\n{run.log()[-3000:]}")


def _run_pod(rel: ChartRelease, component: str) -> PodRun:
    """Run one of the component's pods, as the API server holds it, as a local process."""
    pod = next(p for p in rel.pods(component) if p["status"].get("phase") == "Running")
    return rel.node.runner.start(pod, at="2026-10-19T08:00:00Z")


def _token(rel: ChartRelease) -> str:
    secret = rel.kube.call(
        rel.kube.core.read_namespaced_secret,
        f"{rel.fullname}-api-token",
        rel.namespace,
        what="token secret",
    )
    return base64.b64decode(secret["data"]["token"]).decode()


def _assert_installed(rel: ChartRelease, pg_url: str) -> None:
    [migrate] = rel.runs_of("migrate")
    assert migrate.exit_code == 0, migrate.log()
    assert "database at revision" in migrate.log()
    engine = create_db_engine(pg_url)
    with engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version_num FROM gps.alembic_version")).scalar()
    assert version
    [imported] = rel.runs_of("api-token")
    assert imported.exit_code == 0 and "imported: token" in imported.log(), imported.log()
    # the chart's token has no expiry: any instant verifies it, none is read from the wall clock
    record = TokenRepository(engine).verify(_token(rel), now=datetime(2026, 10, 21, 10, tzinfo=UTC))
    assert record is not None and (record.name, record.scope) == ("helm-admin", "admin")
    engine.dispose()
    jobs = rel.kube.items(rel.kube.batch.list_namespaced_job, rel.namespace, what="jobs")
    assert jobs == []  # hook-delete-policy: hook-succeeded
    accounts = {
        c: rel.deployment(c)["spec"]["template"]["spec"]["serviceAccountName"]
        for c in ("webserver", "daemon", "code-location", "engine", "api")
    }
    assert accounts == {
        "webserver": f"{rel.fullname}-run-launcher",
        "daemon": f"{rel.fullname}-run-launcher",
        "code-location": f"{rel.fullname}-code-location",
        "engine": f"{rel.fullname}-engine",
        "api": f"{rel.fullname}-api",
    }
    engine_deploy = rel.deployment("engine")
    assert engine_deploy["spec"]["replicas"] == 3
    assert engine_deploy["status"]["readyReplicas"] == 3
    capacity = rel.kube.call(
        rbac.client.RbacAuthorizationV1Api(rel.kube.api_client).read_cluster_role,
        f"{rel.fullname}-capacity",
        what="role",
    )
    assert capacity["rules"] == rbac.rules()["gps-dagster-capacity"]


def _assert_pods_really_run(rel: ChartRelease) -> None:
    engine = _run_pod(rel, "engine")
    try:
        port = rel.ports["metrics"]
        metrics = _wait_http(f"http://127.0.0.1:{port}/metrics", engine)
        assert "deployschedule_actions" in metrics, engine.log()
        assert _wait_http(f"http://127.0.0.1:{port}/healthz", engine) == "ok\n"
        assert engine.spec.env["GPS_BACKEND"] == "kubernetes"
        assert engine.spec.env["GPS_NAMESPACES"] == rel.namespace
        assert "KUBECONFIG" in engine.spec.env  # the adapter's own token, not the admin's
    finally:
        rel.node.runner.kill(engine)
    api = _run_pod(rel, "api")
    try:
        auth = {"Authorization": f"Bearer {_token(rel)}"}
        body = _wait_http(
            f"http://127.0.0.1:{rel.ports['api']}/admin/deploy-schedules", api, headers=auth
        )
        assert "items" in json.loads(body), api.log()
    finally:
        rel.node.runner.kill(api)
    location = _run_pod(rel, "code-location")
    try:
        probe = rel.deployment("code-location")["spec"]["template"]["spec"]["containers"][0][
            "readinessProbe"
        ]["exec"]["command"]
        deadline, done = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            done = subprocess.run(
                probe, env=location.spec.env, capture_output=True, text=True, check=False
            )
            if done.returncode == 0 or location.proc is None or location.proc.poll() is not None:
                break
            time.sleep(1)
        assert done is not None and done.returncode == 0, location.log()
        assert "deployschedule_" in _wait_http(
            f"http://127.0.0.1:{rel.ports['metrics']}/metrics", location
        )
    finally:
        rel.node.runner.kill(location)


def test_install_upgrade_rollback_uninstall(release: ChartRelease, pg_url: str) -> None:
    rel = release
    done = rel.install(rel.values())
    assert "STATUS: deployed" in done.stdout
    assert "Schedule API" in done.stdout  # NOTES.txt
    _assert_installed(rel, pg_url)
    _assert_pods_really_run(rel)
    token = _token(rel)

    upgraded = rel.helm(
        "upgrade",
        rel.release,
        str(CHART),
        "--reuse-values",
        "--set",
        "engine.replicaCount=1",
        "--wait",
        "--timeout",
        "180s",
    )
    assert "STATUS: deployed" in upgraded.stdout
    assert rel.deployment("engine")["spec"]["replicas"] == 1
    assert [r.exit_code for r in rel.runs_of("migrate")] == [0, 0]  # the hook ran again
    assert _token(rel) == token  # kept across upgrades (lookup)

    rel.helm("rollback", rel.release, "1", "--wait", "--timeout", "180s")
    assert rel.deployment("engine")["spec"]["replicas"] == 3
    history = json.loads(rel.helm("history", rel.release, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2, 3]
    assert history[-1]["status"] == "deployed"

    rel.helm("uninstall", rel.release, "--wait", "--timeout", "120s")
    rel.installed = False
    left = rel.kube.items(rel.kube.apps.list_namespaced_deployment, rel.namespace, what="deps")
    assert left == []
    roles = rbac.client.RbacAuthorizationV1Api(rel.kube.api_client)
    names = {r["metadata"]["name"] for r in rel.kube.items(roles.list_cluster_role, what="roles")}
    assert not {n for n in names if n.startswith(rel.fullname)}


def test_a_url_without_psycopg2_fails_the_install_in_the_migration_hook(
    release: ChartRelease,
) -> None:
    rel = release
    bare = rel.db_url.replace("postgresql+psycopg2://", "postgresql://", 1)
    assert bare != rel.db_url
    rel.put_db_secret(bare)
    done = rel.install(rel.values(), timeout="60s", check=False)
    assert done.returncode != 0
    assert "pre-install" in done.stderr and "failed" in done.stderr
    [migrate] = rel.runs_of("migrate")
    assert migrate.exit_code == 1
    assert "invalid_db_url" in migrate.log()
    deployments = rel.kube.items(
        rel.kube.apps.list_namespaced_deployment, rel.namespace, what="deps"
    )
    assert deployments == []  # nothing started on a database Dagster cannot use
