"""The fake kubelet runs Job pods of a local image (``fake/runner.py``, ``fake/containers.py``).

On the real control plane: a Job's pod is executed as a local process with what a kubelet
would give it — env (values, ``$(VAR)``, Secret/ConfigMap refs, ``envFrom``), configMap /
secret / emptyDir volumes at their mount paths, its ServiceAccount's identity — and its phase
follows the process: Succeeded or Failed with the exit code, which the real Job controller
counts. A missing Secret keeps it waiting in CreateContainerConfigError until the Secret
exists; a deleted pod's process is terminated; a pod that is not a Job's is only marked
Running (never executed); a volume that cannot exist here fails the pod with the reason.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.backends.k8s import Kube
from gps_dagster.clocks import VirtualClock
from gps_dagster.ports import NotFound
from gps_dagster.testing.k8s.hosts import ProductNode
from gps_dagster.testing.k8s.pools import wait_default_tokens
from tests.helm.chart_cluster import IMAGE, cluster_of, local_image
from tests.k8s.cluster import kube


class Host:
    def __init__(self, kubeconfig: str, root: Path) -> None:
        self.kube: Kube = kube(kubeconfig)
        self.ns = f"run-{uuid.uuid4().hex[:6]}"
        self.clock = VirtualClock(datetime(2026, 10, 19, 8, tzinfo=UTC))
        self.node = ProductNode(
            self.kube,
            self.clock,
            name=f"runner-{self.ns}",
            images={IMAGE: local_image()},
            root=root,
            cluster=cluster_of(kubeconfig),
            advance=self.clock.advance,
        )

    def job(self, name: str, container: dict[str, Any], **spec: Any) -> None:
        pod_spec = {
            "restartPolicy": "Never",
            "nodeSelector": self.node.selector,
            "tolerations": [self.node.toleration],
            "containers": [{"name": "main", "image": IMAGE, **container}],
            **spec,
        }
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
        }
        self.kube.call(
            self.kube.batch.create_namespaced_job, self.ns, body, what="job", mutating=True
        )

    def pod(self, job: str) -> dict[str, Any]:
        found = self.wait(
            lambda: self.kube.items(
                self.kube.core.list_namespaced_pod,
                self.ns,
                label_selector=f"job-name={job}",
                what="pods",
            )
        )
        return dict(found[0])

    def wait(self, check: Any, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"not reached in {timeout} s; runs: {self.node.runner.runs}")

    def phase(self, job: str, want: str) -> dict[str, Any]:
        return dict(self.wait(lambda: (p := self.pod(job))["status"].get("phase") == want and p))

    def run_of(self, job: str) -> Any:
        return self.wait(
            lambda: next(
                (r for r in self.node.runner.runs.values() if r.name.startswith(job + "-")), None
            )
        )


@pytest.fixture
def host(k8s_cluster: str, tmp_path: Path) -> Iterator[Host]:
    h = Host(k8s_cluster, tmp_path)
    h.kube.call(
        h.kube.core.create_namespace, {"metadata": {"name": h.ns}}, what="ns", mutating=True
    )
    wait_default_tokens(h.kube, [h.ns])
    h.node.start()
    try:
        yield h
    finally:
        h.kube.call(h.kube.core.delete_namespace, h.ns, what="ns", mutating=True)
        h.node.close()


def test_a_job_pod_runs_with_its_env_volumes_and_identity_and_waits_for_its_secret(
    host: Host,
) -> None:
    cm = {"metadata": {"name": "conf"}, "data": {"GREETING": "hello", "file.txt": "from-cm"}}
    host.kube.call(
        host.kube.core.create_namespaced_config_map, host.ns, cm, what="cm", mutating=True
    )
    script = (
        'echo "$GREETING $(NAME) $SECRET_VALUE $POD"; cat "$1"; echo; env | grep -c txt; '
        'echo scratch > "$2/x" && cat "$2/x"; '
        'python -c "from kubernetes import client, config; config.load_kube_config(); '
        "client.CoreV1Api().list_namespaced_pod('$POD_NS')\" 2>&1 | grep -o 'Forbidden' | head -1"
    )
    host.job(
        "env",
        {
            # paths as words of their own: the fake remaps words, not paths inside a script
            "command": ["/bin/sh", "-c", script, "sh", "/etc/conf/file.txt", "/scratch"],
            "env": [
                {"name": "NAME", "value": "world"},
                {
                    "name": "SECRET_VALUE",
                    "valueFrom": {"secretKeyRef": {"name": "later", "key": "v"}},
                },
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            ],
            "envFrom": [{"configMapRef": {"name": "conf"}, "prefix": ""}],
            "volumeMounts": [
                {"name": "conf", "mountPath": "/etc/conf"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        volumes=[
            {"name": "conf", "configMap": {"name": "conf"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    waiting = host.wait(lambda: (p := host.pod("env"))["status"].get("containerStatuses") and p)
    state = waiting["status"]["containerStatuses"][0]["state"]
    assert state["waiting"]["reason"] == "CreateContainerConfigError"
    assert waiting["status"]["phase"] == "Pending"
    secret = {"metadata": {"name": "later"}, "stringData": {"v": "s3cret"}}
    host.kube.call(
        host.kube.core.create_namespaced_secret, host.ns, secret, what="secret", mutating=True
    )
    done = host.phase("env", "Succeeded")
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    run = host.run_of("env")
    lines = run.log().split("\n")
    assert lines[0] == f"hello world s3cret {done['metadata']['name']}"
    assert lines[1:4] == ["from-cm", "0", "scratch"]  # file.txt is no variable name: skipped
    assert lines[4] == "Forbidden"  # it acted as the namespace's default ServiceAccount
    job = host.wait(
        lambda: host.kube.call(host.kube.batch.read_namespaced_job, "env", host.ns, what="job")[
            "status"
        ].get("succeeded")
    )
    assert job == 1


def test_a_failing_command_fails_the_pod_and_the_job_with_its_exit_code(host: Host) -> None:
    host.job("fail", {"command": ["/bin/sh", "-c", "echo boom; exit 3"]})
    pod = host.phase("fail", "Failed")
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (3, "Error")
    failed = host.wait(
        lambda: host.kube.call(host.kube.batch.read_namespaced_job, "fail", host.ns, what="job")[
            "status"
        ].get("failed")
    )
    assert failed == 1


def test_a_deleted_pod_has_its_process_terminated(host: Host) -> None:
    host.job("sleep", {"command": ["sleep", "600"]}, terminationGracePeriodSeconds=2)
    pod = host.phase("sleep", "Running")
    run = host.run_of("sleep")
    assert run.proc.poll() is None
    host.kube.call(
        host.kube.core.delete_namespaced_pod,
        pod["metadata"]["name"],
        host.ns,
        what="delete",
        mutating=True,
    )
    host.wait(lambda: run.proc.poll() is not None)
    assert run.proc.returncode < 0  # killed by a signal, not finished

    def gone() -> bool:
        try:
            host.kube.call(
                host.kube.core.read_namespaced_pod, pod["metadata"]["name"], host.ns, what="pod"
            )
        except NotFound:
            return True
        return False

    assert host.wait(gone)


def test_only_job_pods_are_executed_and_unsupported_volumes_fail_the_pod(host: Host) -> None:
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {
            "nodeSelector": host.node.selector,
            "tolerations": [host.node.toleration],
            "containers": [
                {"name": "main", "image": IMAGE, "command": ["/bin/sh", "-c", "touch /tmp/never"]}
            ],
        },
    }
    host.kube.call(host.kube.core.create_namespaced_pod, host.ns, bare, what="pod", mutating=True)
    host.job(
        "hostpath",
        {"command": ["true"], "volumeMounts": [{"name": "h", "mountPath": "/h"}]},
        volumes=[{"name": "h", "hostPath": {"path": "/etc"}}],
    )
    failed = host.phase("hostpath", "Failed")
    assert failed["status"]["reason"] == "UnsupportedByFakeKubelet"
    assert "hostPath" in failed["status"]["message"]
    running = host.wait(
        lambda: (
            (p := host.kube.call(host.kube.core.read_namespaced_pod, "bare", host.ns, what="pod"))[
                "status"
            ].get("phase")
            == "Running"
            and p
        )
    )
    assert running["status"]["phase"] == "Running"
    assert not [r for r in host.node.runner.runs.values() if r.name == "bare"]
