"""The run launcher's Role is exactly what dagster-k8s's K8sRunLauncher does (SPEC R-K8S-6).

The chart's run-launcher ServiceAccount, Role and RoleBinding are applied with the wheel's
``kubectl``; then, acting as that ServiceAccount with a recorder on its HTTP transport, the
test makes every Kubernetes call K8sRunLauncher 0.29 makes, through dagster-k8s's own client:
``launch_run`` (create the Job), ``check_run_worker_health`` (read the Job's status),
``get_run_worker_debug_info`` (the Job's pods, their logs and Warning events, the Job's
events) and ``terminate`` (delete the Job and its pods). Every call passed RBAC (no 403), the
(group, resource, verb) set used equals the set the Role grants — nothing missing, nothing
extra — and the identity is refused a Job in another namespace.
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes
import pytest
import yaml
from dagster_k8s.client import DagsterKubernetesClient

from gps_dagster.clocks import VirtualClock
from gps_dagster.testing.k8s.hosts import ProductNode, service_account_kubeconfig
from gps_dagster.testing.k8s.pools import wait_default_tokens
from tests.helm.chart_cluster import IMAGE, cluster_of, local_image
from tests.helm.helm_support import CHART, KUBE_VERSION, binary, helm
from tests.k8s.cluster import kube

Grant = tuple[str, str, str]


def grant_of(method: str, url: str) -> Grant:
    parts = urlparse(url).path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = {
        "GET": "get" if len(rest) > 1 else "list",
        "POST": "create",
        "DELETE": "delete",
        "PATCH": "patch",
        "PUT": "update",
    }[method]
    return group, resource, verb


class Recorder:
    def __init__(self, api_client: Any) -> None:
        self.seen: set[Grant] = set()
        self.forbidden: list[str] = []
        rest = api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.seen.add(grant_of(method, url))
        try:
            return self._inner(method, url, *args, **kwargs)
        except kubernetes.client.ApiException as exc:
            if exc.status == 403:
                self.forbidden.append(f"{method} {url}")
            raise


def granted(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def container_running(admin: Any, namespace: str) -> bool:
    pods = admin.core.list_namespaced_pod(namespace, label_selector="job-name=dagster-run-x").items
    return any(
        status.state and status.state.running
        for pod in pods
        for status in (pod.status.container_statuses or [])
    )


@pytest.fixture
def namespace(k8s_cluster: str) -> Iterator[str]:
    admin = kube(k8s_cluster)
    ns = f"rl-{uuid.uuid4().hex[:6]}"
    admin.call(admin.core.create_namespace, {"metadata": {"name": ns}}, what="ns", mutating=True)
    wait_default_tokens(admin, [ns])
    yield ns
    admin.call(admin.core.delete_namespace, ns, what="ns", mutating=True)


def test_the_run_launcher_role_is_exactly_what_k8s_run_launcher_uses(
    k8s_cluster: str, namespace: str, tmp_path: Path
) -> None:
    admin = kube(k8s_cluster)
    rendered = helm(
        "template",
        "r",
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "postgresql.existingSecret=db",
        "--set",
        f"rbac.namespaces[0]={namespace}",
        "--set",
        "api.adminToken.existingSecret=token",
        "--show-only",
        "templates/rbac-run-launcher.yaml",
        "--show-only",
        "templates/serviceaccount.yaml",
    ).stdout
    applied = subprocess.run(
        [
            binary("kubectl"),
            "--kubeconfig",
            k8s_cluster,
            "--namespace",
            namespace,
            "apply",
            "-f",
            "-",
        ],
        input=rendered,
        capture_output=True,
        text=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    role = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Role")
    cluster = cluster_of(k8s_cluster)
    config = service_account_kubeconfig(
        admin,
        namespace,
        "r-gps-dagster-run-launcher",
        tmp_path / "launcher.kubeconfig",
        cluster=cluster,
    )
    api_client = kubernetes.config.new_client_from_config(config_file=str(config))
    recorder = Recorder(api_client)
    client = DagsterKubernetesClient(
        kubernetes.client.BatchV1Api(api_client),
        kubernetes.client.CoreV1Api(api_client),
        logging.getLogger("launcher"),
        time.sleep,
        time.monotonic,
    )
    clock = VirtualClock(datetime(2026, 10, 19, 8, tzinfo=UTC))
    node = ProductNode(
        admin,
        clock,
        name=f"rl-{namespace}",
        images={IMAGE: local_image()},
        root=tmp_path / "pods",
        cluster=cluster,
        advance=clock.advance,
    ).start()
    try:
        job = kubernetes.client.V1Job(
            metadata=kubernetes.client.V1ObjectMeta(name="dagster-run-x"),
            spec=kubernetes.client.V1JobSpec(
                backoff_limit=0,
                template={
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": node.selector,
                        "tolerations": [node.toleration],
                        "containers": [
                            {"name": "dagster", "image": IMAGE, "args": ["sleep", "600"]}
                        ],
                    }
                },
            ),
        )
        client.create_namespaced_job_with_retries(job, namespace)  # launch_run
        status = client.get_job_status("dagster-run-x", namespace)  # check_run_worker_health
        assert status is not None
        # Until the API server shows the container running: dagster-k8s fetches a container's
        # log only when its reported status is running or terminated (``_has_container_logs``),
        # and the kubelet reports the status after it starts the container (a run of 84627f5
        # asked between the two and never called pods/log).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not container_running(admin, namespace):
            time.sleep(0.2)
        assert node.runner.runs and container_running(admin, namespace)
        pods = client.get_pod_names_in_job("dagster-run-x", namespace)  # get_run_worker_debug_info
        assert len(pods) == 1
        info = client.get_pod_debug_info(pods[0], namespace)
        assert "Failure fetching pod logs" not in info or "Forbidden" not in info
        client.get_job_debug_info("dagster-run-x", namespace)
        assert client.delete_job("dagster-run-x", namespace) is True  # terminate
    finally:
        node.close()
    assert recorder.forbidden == []
    assert recorder.seen == granted(role["rules"])
    with pytest.raises(kubernetes.client.ApiException) as refused:
        client.batch_api.create_namespaced_job("default", job)
    assert refused.value.status == 403  # only the job namespace
