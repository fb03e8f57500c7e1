"""A fake node for the product's own pods (the Helm chart's), and identities as kubeconfigs.

The chart's pods (webserver, daemon, code location, engine, API, hook and run Jobs) need no GPU.
``ProductNode`` registers one GPU-less Node, tainted so that no other test's pod lands on it,
with a ``NodeSimulator`` whose ``PodRunner`` *executes* Job pods of the local image (the
migration hook, the token hook, every Dagster run) and marks every other pod Running/Ready. A
background thread syncs it; its clock is the caller's (a virtual clock the thread advances by
``step_s`` per round, so grace periods end without reading the wall clock; or the wall clock).

``service_account_kubeconfig`` writes a kubeconfig acting as a ServiceAccount (its token
Secret, Kubernetes 1.20): how a process outside the cluster runs with exactly the identity and
RBAC a pod of that ServiceAccount would have.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gps_dagster.backends.k8s.api import Kube
from gps_dagster.ports import Clock, CoreError
from gps_dagster.testing.k8s.nodes import GpuNode
from gps_dagster.testing.k8s.nodesim import NodeSimulator
from gps_dagster.testing.k8s.runner import Cluster, LocalImage, PodRunner

TAINT_KEY = "gps.dagster.io/product-node"


class ProductNode:
    """One tainted, GPU-less fake node whose kubelet runs the product's Job pods."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock,
        *,
        name: str,
        images: Mapping[str, LocalImage],
        root: Path,
        cluster: Cluster,
        advance: Callable[[float], object] | None = None,
        step_s: float = 1.0,
        every_s: float = 0.2,
    ) -> None:
        self.kube, self.name = kube, name
        self.runner = PodRunner(kube, images, root=root, cluster=cluster)
        node = GpuNode(name, (), labels={TAINT_KEY: name})
        self.sim = NodeSimulator(kube, clock, [node], start_delay_s=0.0, runner=self.runner)
        self._advance, self.step_s, self.every_s = advance, step_s, every_s
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fake-{name}", daemon=True)

    @property
    def toleration(self) -> dict[str, str]:
        return {"key": TAINT_KEY, "operator": "Equal", "value": self.name, "effect": "NoSchedule"}

    @property
    def selector(self) -> dict[str, str]:
        return {TAINT_KEY: self.name}

    def start(self) -> ProductNode:
        self.sim.register()
        taint = {
            "spec": {"taints": [{k: v for k, v in self.toleration.items() if k != "operator"}]}
        }
        self.kube.merge_patch(self.kube.core.patch_node, self.name, body=taint, what="taint node")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sim.sync()
            except CoreError as exc:  # the API server may be busy or stopping: next round
                self.errors = [*self.errors[-20:], str(exc)]
            if self._advance is not None:
                self._advance(self.step_s)

    def close(self) -> None:
        """Stop the thread, kill every pod process, delete the node."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.runner.close()
        self.sim.close(delete_nodes=True)


def service_account_kubeconfig(
    kube: Kube,
    namespace: str,
    account: str,
    path: Path,
    *,
    cluster: Cluster,
    timeout_s: float = 30.0,
) -> Path:
    """A kubeconfig at ``path`` acting as ``namespace/account`` (waits for its token Secret)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for secret in kube.items(kube.core.list_namespaced_secret, namespace, what="secrets"):
            notes = secret["metadata"].get("annotations") or {}
            if (
                secret.get("type") == "kubernetes.io/service-account-token"
                and notes.get("kubernetes.io/service-account.name") == account
                and (secret.get("data") or {}).get("token")
            ):
                token = base64.b64decode(secret["data"]["token"]).decode()
                path.write_text(
                    "apiVersion: v1\nkind: Config\ncurrent-context: sa\n"
                    f"clusters:\n- name: c\n  cluster:\n    server: {cluster.server}\n"
                    f"    certificate-authority: {cluster.ca_file}\n"
                    f"users:\n- name: {account}\n  user:\n    token: {token}\n"
                    f"contexts:\n- name: sa\n  context: {{cluster: c, user: {account}}}\n",
                    encoding="utf-8",
                )
                return path
        if time.monotonic() > deadline:
            raise TimeoutError(f"no token Secret for {namespace}/{account} after {timeout_s} s")
        time.sleep(0.1)
