"""A Helm release of the chart on the test control plane, with a fake node that runs its Jobs.

``ChartRelease`` owns a namespace, the database URL Secret (a fresh database on the real
PostgreSQL of ``make test``), a ``ProductNode`` (the fake kubelet executes the release's Job
pods — migration hook, token hook, Dagster runs — as local processes of this venv, the local
image ``gps-dagster:test`` standing for the Containerfile's) and the release itself; ``close``
uninstalls what is left, deletes the namespace and the node, and kills every pod process.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.clocks import VirtualClock
from gps_dagster.demo.devserver import free_ports
from gps_dagster.ports import Clock, CoreError, NotFound
from gps_dagster.testing.k8s.hosts import ProductNode
from gps_dagster.testing.k8s.pools import wait_default_tokens
from gps_dagster.testing.k8s.runner import Cluster, LocalImage
from tests.helm.helm_support import CHART, REPO, helm

IMAGE = "gps-dagster:test"
DB_SECRET = "gps-dagster-postgresql"


def local_image() -> LocalImage:
    """The Containerfile's image on this machine: its WORKDIR and ENV, the repository standing
    for /opt/gps (definitions.py) and this venv for /opt/gps/venv."""
    venv = Path(sys.executable).parent.parent
    return LocalImage(
        workdir="/opt/gps",
        env={
            "PATH": "/opt/gps/venv/bin:/usr/local/bin:/usr/bin:/bin",
            "DAGSTER_HOME": "/opt/dagster/dagster_home",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        paths={"/opt/gps/venv": str(venv), "/opt/gps": str(REPO)},
    )


def cluster_of(kubeconfig: str) -> Cluster:
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    entry = cfg["clusters"][0]["cluster"]
    return Cluster(entry["server"], entry["certificate-authority"])


class ChartRelease:
    """One release of helm/gps-dagster in a namespace of its own (see the module docstring)."""

    def __init__(
        self,
        kubeconfig: str,
        db_url: str,
        root: Path,
        *,
        clock: Clock | None = None,
        scope: Sequence[str] = (),
        placement: Mapping[str, Any] | None = None,
    ) -> None:
        self.kubeconfig, self.db_url, self.root = kubeconfig, db_url, root
        self.kube = Kube(connect(kubeconfig, None))
        self.cluster = cluster_of(kubeconfig)
        suffix = uuid.uuid4().hex[:6]
        self.namespace, self.release = f"helm-{suffix}", f"h{suffix}"
        self.fullname = f"{self.release}-gps-dagster"
        self.scope = tuple(scope) or (self.namespace,)
        self.placement = dict(placement) if placement is not None else None
        """nodeSelector/tolerations of a node that runs pods itself (the real node): then the
        fake ``ProductNode`` below is never started."""
        virtual = clock is None
        self.clock: Clock = clock or VirtualClock(datetime(2026, 10, 19, 8, tzinfo=UTC))
        self.node = ProductNode(
            self.kube,
            self.clock,
            name=f"product-{suffix}",
            images={IMAGE: local_image()},
            root=root / "pods",
            cluster=self.cluster,
            advance=self._advance if virtual else None,
        )
        metrics, grpc, api = free_ports(3)  # distinct: one Service exposes all three
        self.ports = {"metrics": metrics, "grpc": grpc, "api": api}
        self.installed = False

    def _advance(self, seconds: float) -> None:
        assert isinstance(self.clock, VirtualClock)
        self.clock.advance(seconds)

    # -- setup / teardown ----------------------------------------------------------------------

    def start(self) -> ChartRelease:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        self.kube.call(self.kube.core.create_namespace, body, what="namespace", mutating=True)
        wait_default_tokens(self.kube, [self.namespace])
        self.put_db_secret(self.db_url)
        if self.placement is None:
            self.node.start()
        return self

    def put_db_secret(self, url: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": DB_SECRET},
            "stringData": {"postgresql-url": url},
        }
        with contextlib.suppress(NotFound):
            self.kube.call(
                self.kube.core.delete_namespaced_secret,
                DB_SECRET,
                self.namespace,
                what="delete secret",
                mutating=True,
            )
        self.kube.call(
            self.kube.core.create_namespaced_secret,
            self.namespace,
            body,
            what="db secret",
            mutating=True,
        )

    def close(self) -> None:
        try:
            if self.installed:
                self.helm("uninstall", self.release, check=False)
            with contextlib.suppress(CoreError):
                self.kube.call(
                    self.kube.core.delete_namespace, self.namespace, what="ns", mutating=True
                )
            for pod in self.kube.items(
                self.kube.core.list_namespaced_pod, self.namespace, what="pods"
            ):
                with contextlib.suppress(CoreError):
                    self.kube.call(
                        self.kube.core.delete_namespaced_pod,
                        pod["metadata"]["name"],
                        self.namespace,
                        grace_period_seconds=0,
                        what="pod",
                        mutating=True,
                    )
        finally:
            if self.placement is None:
                self.node.close()

    # -- helm ----------------------------------------------------------------------------------

    def values(self, **extra: Any) -> dict[str, Any]:
        """Values for this cluster: the local image, the fake node, free ports, the scope."""
        placement = self.placement or {
            "nodeSelector": self.node.selector,
            "tolerations": [self.node.toleration],
        }
        base: dict[str, Any] = {
            "image": {"repository": IMAGE.split(":")[0], "tag": "test", "pullPolicy": "Never"},
            "postgresql": {"existingSecret": DB_SECRET},
            **placement,
            "runs": {**placement, "ttlSecondsAfterFinished": 5},
            "rbac": {"namespaces": list(self.scope), "policyNamespace": self.namespace},
            "metrics": {"port": self.ports["metrics"]},
            "codeLocation": {"port": self.ports["grpc"]},
            "api": {"port": self.ports["api"], "adminToken": {"create": True}},
            "migrate": {"backoffLimit": 0},
        }
        return _merge(base, extra)

    def values_file(self, values: Mapping[str, Any], name: str = "values.yaml") -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(dict(values)))
        return path

    def helm(self, *args: str, check: bool = True) -> Any:
        return helm(*args, "--namespace", self.namespace, kubeconfig=self.kubeconfig, check=check)

    def install(
        self, values: Mapping[str, Any], *, timeout: str = "180s", check: bool = True
    ) -> Any:
        done = self.helm(
            "install",
            self.release,
            str(CHART),
            "-f",
            str(self.values_file(values)),
            "--wait",
            "--timeout",
            timeout,
            check=check,
        )
        self.installed = self.installed or done.returncode == 0
        return done

    # -- reading the cluster -------------------------------------------------------------------

    def deployment(self, component: str) -> dict[str, Any]:
        return self.kube.call(
            self.kube.apps.read_namespaced_deployment,
            f"{self.fullname}-{component}",
            self.namespace,
            what="deployment",
        )

    def pods(self, component: str) -> list[dict[str, Any]]:
        return self.kube.items(
            self.kube.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"app.kubernetes.io/component={component}",
            what="pods",
        )

    def runs_of(self, job: str) -> list[Any]:
        """The executed pods of the Job named ``<fullname>-<job>`` (in start order)."""
        prefix = f"{self.fullname}-{job}-"
        return [r for r in self.node.runner.runs.values() if r.name.startswith(prefix)]


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
