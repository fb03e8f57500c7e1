"""The Core contract suite's harness on the ONE real node (kubelet + containerd + the fake GPU
device plugin, ``testing/k8s/realnode.py``): the pool's workloads run the stand-in model server
there, loading and draining for the pool's ``start_delay_s`` / ``stop_grace_s``.

Nothing here drives a fake: the scheduler binds, the kubelet starts the containers, the readiness
probe and the drain decide the timings. So the clock cannot be moved under the pods: a case waits
with ``eventually`` (its time plus a bounded slack for a loaded kubelet), and only pools that fit
the node are accepted — ``fit_problems`` says why not, and
``tests/contract/real_node_exclusions.py`` lists the cases left out for it.
"""

# Decisions embodied here (docs/decisions.md):
# * “The contract suite on the real node: what fits one node”

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from typing import Any, Literal

from gps_dagster.backends.k8s import K8sCore, names
from gps_dagster.backends.k8s.api import Obj
from gps_dagster.domain.pool import DeploySpec, FaultSpec, PoolSpec
from gps_dagster.ports import Core, CoreError, NotFound
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s import realnode
from gps_dagster.testing.k8s.layout import k8s_name
from gps_dagster.testing.k8s.pools import ClusterPool
from tests.k8s.cluster import K8sHarness, SettlingCore, unique

REAL_NODE_GPUS = 4
SLACK_S = 60.0
"""How much longer than the pool's own time a step may take on the real kubelet (image already
imported; on 2 loaded cores a container start has been seen to take several seconds)."""
READY_AT_LOAD_S = 90.0
GRACE_MARGIN_S = 2
"""The grace period is the drain plus this: the drain ends the container, the kubelet's SIGKILL
only caps a drain that overruns (a wider margin only slows every teardown)."""
# A group the node cannot hold yet is the scheduler's ``PodScheduled=False reason=Unschedulable``;
# kube-scheduler keeps it in its unschedulable queue and moves it back to be retried on a cluster
# event such as an assigned pod's deletion, after its backoff (1 s initial, 10 s at most:
# ``PriorityQueue`` in kubernetes pkg/scheduler/internal/queue/scheduling_queue.go, release-1.20),
# so "placed once the release is done" is a bounded wait there, not an instant.
SIM_ONLY_FAULTS = ("never_ready", "misplace")
"""Faults the node simulator plays: the real kubelet cannot be told to, so they are refused."""


def fit_problems(spec: PoolSpec, *, gpus: int = REAL_NODE_GPUS) -> list[str]:
    """Why ``spec`` cannot be laid out on one real node of ``gpus`` GPUs (empty: it fits)."""
    problems = []
    if len(spec.nodes) != 1:
        problems.append(f"{len(spec.nodes)} nodes")
    problems += [f"node {n.name} has {n.gpus} GPUs" for n in spec.nodes if n.gpus > gpus]
    problems += [
        f"{d.id} spans {d.nodes_per_replica} nodes" for d in spec.deploys if d.nodes_per_replica > 1
    ]
    if spec.sim.timings.publish_lag_s:
        problems.append(
            f"a {spec.sim.timings.publish_lag_s:g} s publish lag (the kubelet has none)"
        )
    if spec.reservations:
        problems.append("GPU reservations on the pool's own UUIDs (not the device plugin's)")
    if spec.sim.foreign:
        problems.append("foreign workloads")
    return problems


class NotOnOneNode(ValueError):
    pass


class RealNodePool(ClusterPool):
    """A pool that fits the real node, its workloads as stand-in model servers tolerating it."""

    def create(self, *, heartbeat: bool = True) -> RealNodePool:
        try:
            self._namespaces()
            self._policy()
            for d in self.spec.deploys:
                self._deploy(d)
            self.settle()
            self._wait_running_ready()
        except BaseException:
            self.close()
            raise
        return self

    def steps(self) -> list[Any]:
        return []  # no fakes: the scheduler and the kubelet are real

    def template(self, d: DeploySpec) -> Obj:
        timings = self.spec.sim.timings
        env = {"LOAD_S": timings.start_delay_s, "DRAIN_S": timings.stop_grace_s}
        gpus = {"limits": {names.GPU: str(d.gpus_per_node)}} if d.gpus_per_node else {}
        spec: Obj = {
            "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
            "tolerations": [realnode.REAL_NODE_TOLERATION],
            "terminationGracePeriodSeconds": math.ceil(timings.stop_grace_s) + GRACE_MARGIN_S,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [
                {
                    "name": "serve",
                    "image": realnode.STANDIN_IMAGE,
                    "env": [{"name": k, "value": str(math.ceil(v))} for k, v in env.items()],
                    "resources": gpus,
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": 8000},
                        "periodSeconds": 1,
                    },
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }
        return {
            "metadata": {"labels": {"app": k8s_name(d.id), names.DEPLOY_ID: d.id}},
            "spec": spec,
        }

    def _wait_running_ready(self) -> None:
        """The pool's state at load: every running deploy Ready (its probe passed)."""
        deadline = time.monotonic() + READY_AT_LOAD_S
        for d in self.spec.deploys:
            if d.state != "running":
                continue
            _, ns, name = self.workloads[d.id]
            while True:
                obj = self.kube.call(
                    self.kube.apps.read_namespaced_deployment, name, ns, what="read"
                )
                if ((obj.get("status") or {}).get("readyReplicas") or 0) >= d.replicas:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{d.id} not Ready on the real node after {READY_AT_LOAD_S} s"
                    )
                time.sleep(0.2)

    def close(self) -> None:
        """Scale the workloads to zero (the kubelet drains their pods at once; a namespace's own
        deletion reaches them many seconds later), delete the namespaces, wait for the pods."""
        for kind, ns, name in self.workloads.values():
            if kind == "Deployment":
                with contextlib.suppress(CoreError):
                    self.kube.merge_patch(
                        self.kube.apps.patch_namespaced_deployment,
                        name,
                        ns,
                        body={"spec": {"replicas": 0}},
                        what=f"scale {name} to 0",
                    )
        for ns in (*self.namespaces, self.layout.system):
            with contextlib.suppress(NotFound):
                self.kube.call(
                    self.kube.core.delete_namespace,
                    ns,
                    what=f"delete namespace {ns}",
                    mutating=True,
                )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = [
                p
                for ns in self.namespaces
                for p in self.kube.items(self.kube.core.list_namespaced_pod, ns, what="list pods")
            ]
            if not left:
                return
            if time.monotonic() > deadline - 30:
                for p in left:
                    meta = p["metadata"]
                    with contextlib.suppress(CoreError):
                        self.kube.call(
                            self.kube.core.delete_namespaced_pod,
                            meta["name"],
                            meta["namespace"],
                            grace_period_seconds=0,
                            what="force-delete pod",
                            mutating=True,
                        )
            time.sleep(0.2)


class RealNodeHarness(K8sHarness):
    """``K8sHarness`` with the pool on the real node: same adapter, faults at the same transport."""

    def __init__(self, db_url: str) -> None:
        if not os.environ.get("GPS_TEST_REAL_NODE"):
            raise RuntimeError(
                "GPS_TEST_REAL_NODE is not set: use the real_node fixture or tools/with_k8s.py"
            )
        super().__init__(db_url)

    def load(self, spec: PoolSpec) -> Core:
        problems = fit_problems(spec)
        if problems:
            raise NotOnOneNode(
                f"pool {spec.name} does not fit one real node: {'; '.join(problems)}"
            )
        self._take_node_lock()  # the capacity preview sees every node: no contract fake nodes now
        ensure_tables(self.engine)
        self.pool = RealNodePool(self.admin, self.clock, spec, prefix=unique("r"))
        self.pool.create()
        self.core = K8sCore(
            self.adapter_kube,
            clock=self.clock,
            namespaces=self.pool.namespaces,
            ledger=ReservationRepository(self.engine),
            policy_namespace=self.pool.layout.system,
        )
        return SettlingCore(self.core, self)  # type: ignore[return-value]

    def advance(self, seconds: float) -> None:
        """Moves the adapter's clock only: the kubelet's time is its own (use ``eventually``)."""
        self.clock.advance(seconds)
        self.settle()

    def eventually(self, check: Callable[[], object], *, within_s: float) -> None:
        self.clock.advance(within_s)
        bound = within_s + SLACK_S
        began = time.monotonic()
        while not check():
            assert time.monotonic() - began < bound, f"not so after {bound:g} s on the real node"
            time.sleep(0.2)

    def inject(self, fault: FaultSpec) -> None:
        if fault.effect in SIM_ONLY_FAULTS:
            raise NotImplementedError(f"the real kubelet cannot be made to {fault.effect}")
        super().inject(fault)

    def add_foreign(self, workload_id: str, gpus: int, kind: Literal["static", "intruder"]) -> None:
        raise NotImplementedError("foreign workloads are not laid out on the real node")

    def remove_foreign(self, workload_id: str) -> None:
        raise NotImplementedError("foreign workloads are not laid out on the real node")
