"""The in-cluster path (issue 18): the product as a pod runs it, not as a developer's kubeconfig.

A child process gets what the kubelet gives a container, and nothing else: the environment
``KUBERNETES_SERVICE_HOST``/``PORT`` and the ServiceAccount volume at
``/var/run/secrets/kubernetes.io/serviceaccount`` (``token``, ``ca.crt``, ``namespace``) — the
files the official client's ``load_incluster_config`` reads — holding a **real token of the
chart's engine ServiceAccount** (its identities applied with ``kubectl apply``, as
``test_chart_identities`` does). It runs as UID/GID 10001 (the image's user) with no
capabilities and ``no_new_privs``, on a read-only root filesystem, with only ``/tmp`` writable
(the chart's ``emptyDir``), and makes one engine pass that stops a Deployment in the workload
namespace, then a second that observes it converged.

How, without a container runtime: a private mount namespace (``unshare --mount``, root only) in
which ``/`` is re-mounted read-only, a tmpfs holds the ServiceAccount volume over ``/run``, a tmpfs
is ``/tmp``, and ``/root`` (0700 here, where pyenv's interpreter lives) is covered by a tmpfs with
only the interpreter bound back, as an image ships it readable; then ``setpriv`` drops to 10001.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.workloads import read
from tests.helm.test_chart_identities import Install, _token
from tests.k8s.cluster import kube, unique

REPO = Path(__file__).resolve().parents[2]
UID = 10001
PYENV = Path(sys.base_prefix).resolve()
"""The interpreter's install (pyenv's, under /root here): bound back readable for UID 10001."""


@pytest.fixture
def install(k8s_cluster: str, tmp_path: Path) -> Iterator[Install]:
    it = Install(kube(), tmp_path, cluster_wide=False)
    it.kubeconfig = k8s_cluster
    docs = it.apply()
    try:
        yield it
    finally:
        it.close(docs)


def _deployment(name: str, deploy_id: str) -> dict[str, Any]:
    """One replica that never lands (no node carries the label): the stop has no kubelet to wait
    for."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {names.DEPLOY_ID: deploy_id}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, names.DEPLOY_ID: deploy_id}},
                "spec": {
                    "nodeSelector": {"gps.dagster.io/test-no-such-node": "true"},
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "serve",
                            "image": "serve:1",
                            "resources": {"requests": {names.GPU: "1"}, "limits": {names.GPU: "1"}},
                        }
                    ],
                },
            },
        },
    }


def _script(src: Path, env: dict[str, str], commands: list[list[str]]) -> str:
    """The root half builds the pod's filesystem view; the last line becomes UID 10001."""
    sa = "/run/secrets/kubernetes.io/serviceaccount"
    inner = " && ".join(
        ["id -u", "! touch /gps-rootfs-probe 2>/dev/null", "mkdir -p /tmp/gps"]
        + [shlex.join(c) for c in commands]
    )
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return "\n".join(
        [
            "set -eu",
            "mount --make-rprivate /",
            "mount -t tmpfs -o mode=0755 tmpfs /run",
            f"mkdir -p {sa} /run/stage/pyenv /run/stage/repo",
            f"cp {src}/token {src}/ca.crt {src}/namespace {src}/schedule.json {sa}/",
            f"chmod 0644 {sa}/*",  # the kubelet's default mode for a projected token (0644)
            f"mount --bind {PYENV} /run/stage/pyenv",
            f"mount --bind {REPO} /run/stage/repo",  # the checkout may live under /tmp or /root
            "mount -t tmpfs -o mode=0755 tmpfs /root",
            f"mkdir -p {PYENV} && mount --bind /run/stage/pyenv {PYENV}",
            "mount -t tmpfs -o mode=1777 tmpfs /tmp",
            f"mkdir -p {REPO} && mount --bind /run/stage/repo {REPO}",
            f"mount -o remount,bind,ro {REPO}",
            "mount -o remount,bind,ro /",
            "mount -o remount,ro /run",
            f"exec setpriv --reuid={UID} --regid={UID} --clear-groups --inh-caps=-all "
            f"--no-new-privs env -i {exports} sh -c {shlex.quote(inner)}",
        ]
    )


def test_an_engine_pass_from_inside_the_cluster_as_uid_10001_on_a_read_only_root(
    install: Install, tmp_path: Path
) -> None:
    admin = install.admin
    name, deploy_id = unique("ic"), unique("md-ic")
    admin.call(
        admin.apps.create_namespaced_deployment,
        install.serving,
        _deployment(name, deploy_id),
        what="deployment",
        mutating=True,
    )
    src = tmp_path / "pod"
    src.mkdir()
    account = f"{install.fullname}-engine"
    (src / "token").write_text(_token(admin, install.ns, account))
    cluster = yaml.safe_load(Path(install.kubeconfig).read_text())["clusters"][0]["cluster"]
    (src / "ca.crt").write_text(Path(cluster["certificate-authority"]).read_text())
    (src / "namespace").write_text(install.ns)
    sched = "in-cluster"
    (src / "schedule.json").write_text(
        json.dumps(
            {
                "name": sched,
                "timezone": "UTC",
                "targets": [{"model_deploy_id": deploy_id, "default_state": "stopped"}],
            }
        )
    )
    host, _, port = cluster["server"].removeprefix("https://").partition(":")
    env = {
        "PATH": f"{REPO / '.venv' / 'bin'}:/usr/bin:/bin",
        "HOME": "/tmp",  # the chart's HOME under a read-only root
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "GPS_BACKEND": "kubernetes",
        "GPS_NAMESPACES": install.serving,
        "GPS_POLICY_NAMESPACE": install.ns,
        "GPS_DB_URL": "sqlite:////tmp/gps/gps.sqlite",
        "GPS_CLOCK": "2026-10-19T12:00:00+00:00",
        "GPS_CLOCK_WRITES": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cli = [str(REPO / ".venv" / "bin" / "python"), "-m", "gps_dagster.cli.main"]
    sa = "/run/secrets/kubernetes.io/serviceaccount"
    commands = [
        [*cli, "schedules", "apply", "-f", f"{sa}/schedule.json"],
        [*cli, "gate", "enforce"],
        [*cli, "apply-now", sched],
        [*cli, "apply-now", sched],
        [*cli, "status", sched, "--format", "json"],
    ]
    done = subprocess.run(
        ["unshare", "--mount", "--fork", "sh", "-c", _script(src, env, commands)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.splitlines()[0] == str(UID)
    assert "Traceback" not in done.stderr, done.stderr
    raw = read(admin, "Deployment", install.serving, name).raw
    assert raw["spec"]["replicas"] == 0
    ledger = json.loads(raw["metadata"]["annotations"][names.OPERATIONS])
    assert "stop" in json.dumps(ledger)
    status = json.loads(done.stdout[done.stdout.rindex("\n{") + 1 :])  # the last command's JSON
    assert status["gate"] == "enforce"
    assert [(r["target"], r["phase"]) for r in status["targets"]] == [(deploy_id, "converged")]
