"""A pool file laid out on a real control plane: namespaces, GPU nodes, workloads, quotas.

The same ``PoolSpec`` the simulator loads becomes, on the cluster:

* one admin namespace, one namespace per project (its ``gpu_quota`` a ResourceQuota on
  ``requests.nvidia.com/gpu``, an unpaid project's namespace annotated ``gps.dagster.io/billing``),
  one per reservation namespace; all prefixed so that many pools share one cluster;
* fake GPU nodes (``nodesim``) labelled with the pool, flavor and region;
* per deploy a Deployment (``nodes_per_replica > 1``: a LeaderWorkerSet) labelled with its id,
  whose pods request ``nvidia.com/gpu``, are pinned to the pool's nodes and terminate in
  ``stop_grace_s``; an HPA for ``hpa: true``; its binding as an annotation;
* foreign workloads: a bare pod holding GPUs (static), a Deployment of 1-GPU pods (intruder).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.backends.k8s.renders import exclusive_template
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.pool import DeploySpec, PoolSpec
from gps_dagster.domain.render import kai
from gps_dagster.ports import Clock, CoreError, NotFound
from gps_dagster.testing.k8s.kai import KaiBinder
from gps_dagster.testing.k8s.layout import k8s_name, layout
from gps_dagster.testing.k8s.lws import LwsController
from gps_dagster.testing.k8s.nodes import GpuNode
from gps_dagster.testing.k8s.nodesim import NodeSimulator
from gps_dagster.testing.k8s.settle import settle

POOL_LABEL = names.PREFIX + "pool"
FOREIGN_LABEL = names.PREFIX + "foreign"
KAI_SCHEDULER = "kai-scheduler"
IMAGE = "registry.k8s.io/pause:3.10"
TENANT_LOAD = {"cpu": "4", "memory": "16Gi"}
"""What another tenant's agent takes from each GPU node (of 64 CPUs / 512 GiB)."""


class ClusterPool:
    """A ``PoolSpec`` on a cluster, with the fakes that make its nodes behave."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock,
        spec: PoolSpec,
        *,
        prefix: str,
        reservations: Sequence[Reservation] = (),
        start_delay_s: float | None = None,
    ) -> None:
        self.kube, self.clock, self.spec = kube, clock, spec
        self.layout = layout(spec, prefix)
        self.reservations = {r.id: r for r in reservations}
        timings = spec.sim.timings
        self.start_delay_s = timings.start_delay_s if start_delay_s is None else start_delay_s
        nodes = [
            GpuNode(
                n.name, spec.uuids(n), n.flavor, n.region, {POOL_LABEL: prefix}, n.gpu_memory_mib
            )
            for n in spec.nodes
        ]
        self.sim = NodeSimulator(
            kube,
            clock,
            nodes,
            start_delay_s=0.0,
            publish_lag_s=timings.publish_lag_s,
            reservations=self.reservations.values(),
        )
        self.kai = KaiBinder(
            kube, self.sim, scheduler_name=KAI_SCHEDULER, namespaces=self.namespaces
        )
        self.lws = LwsController(kube, self.namespaces)
        self.workloads: dict[str, tuple[str, str, str]] = {}
        """deploy id → (kind, namespace, name)."""

    @property
    def namespaces(self) -> tuple[str, ...]:
        return self.layout.namespaces()

    def steps(self) -> list[Any]:
        return [self.lws.sync, self.kai.sync, self.sim.sync]

    def settle(self, *, timeout_s: float = 60.0) -> int:
        return settle(self.kube, self.namespaces, self.steps(), timeout_s=timeout_s)

    def drive(self, *, every_s: float = 0.2) -> Driver:
        """Run the fakes on a background thread (wall-clock demo and benchmark)."""
        return Driver(self.steps(), every_s).start()

    # -- creation ----------------------------------------------------------------------------------

    def create(
        self, *, heartbeat: bool = True, settle_timeout_s: float | None = 60.0
    ) -> ClusterPool:
        """Create everything; running deploys are Ready at once (the pool's state at load).

        A failure half-way removes what was created (nodes too), then raises. ``settle_timeout_s``
        bounds the wait for a quiet cluster; None: no wait (a benchmark's thousand pods, whose
        controllers may leave one ReplicaSet status stale for long, waits for what it needs).
        """
        try:
            self._namespaces()
            self._policy()
            self.sim.register(heartbeat=heartbeat)
            self._tenant_load()
            for d in self.spec.deploys:
                self._deploy(d)
            for f in self.spec.sim.foreign:
                self.add_foreign(f.id, f.gpus, f.kind, node=f.node, flavor=f.flavor)
            if settle_timeout_s is not None:
                self.settle(timeout_s=settle_timeout_s)
        except BaseException:
            self.close()
            raise
        self.sim.start_delay_s = self.start_delay_s
        return self

    def _namespaces(self) -> None:
        unpaid = {
            self.layout.projects[p] for p, s in self.spec.projects.items() if s.billing == "unpaid"
        }
        for ns in (*self.namespaces, self.layout.system):
            notes = {names.BILLING: "unpaid"} if ns in unpaid else {}
            body = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "annotations": notes,
                    "labels": {POOL_LABEL: self.layout.prefix},
                },
            }
            self.kube.call(
                self.kube.core.create_namespace, body, what=f"create namespace {ns}", mutating=True
            )
        for p, s in self.spec.projects.items():
            if s.gpu_quota is not None:
                quota = {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": {"name": "gpu-quota"},
                    "spec": {"hard": {"requests." + names.GPU: str(s.gpu_quota)}},
                }
                self.kube.call(
                    self.kube.core.create_namespaced_resource_quota,
                    self.layout.projects[p],
                    quota,
                    what="create quota",
                    mutating=True,
                )
        wait_default_tokens(self.kube, self.namespaces)
        wait_quotas_counted(self.kube, list(self.layout.projects.values()))

    def _tenant_load(self) -> None:
        """Another tenant's node agent on every GPU node (as dcgm-exporter, a log shipper): it
        tolerates every taint and takes CPU and memory, so the nodes are never empty (R-K8S-9)."""
        wait_default_tokens(self.kube, [self.layout.system])
        for i, node in enumerate(sorted(self.sim.nodes)):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"tenant-agent-{i}", "labels": {"app": "tenant-agent"}},
                "spec": {
                    "nodeSelector": {names.HOSTNAME: node},
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "agent",
                            "image": "tenant/agent:1",
                            "resources": {"requests": TENANT_LOAD, "limits": TENANT_LOAD},
                        }
                    ],
                },
            }
            self.kube.call(
                self.kube.core.create_namespaced_pod,
                self.layout.system,
                body,
                what=f"create tenant agent on {node}",
                mutating=True,
            )

    def _policy(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": names.POLICY_CONFIGMAP},
            "data": {"scheduler_name": KAI_SCHEDULER, "queue_template": "cmp-{project}"},
        }
        self.kube.call(
            self.kube.core.create_namespaced_config_map,
            self.layout.system,
            body,
            what="create the scheduling policy",
            mutating=True,
        )

    def template(self, d: DeploySpec) -> Obj:
        spec: Obj = {
            "terminationGracePeriodSeconds": int(self.spec.sim.timings.stop_grace_s),
            "nodeSelector": {POOL_LABEL: self.layout.prefix},
            "containers": [container(d.gpus_per_node)],
            "automountServiceAccountToken": False,
        }
        if d.flavor:
            spec["nodeSelector"][names.GPU_PRODUCT] = d.flavor
        if len(d.node_selector) == 1:
            spec["nodeSelector"][names.HOSTNAME] = d.node_selector[0]
        elif d.node_selector:
            term = {
                "matchExpressions": [
                    {"key": names.HOSTNAME, "operator": "In", "values": list(d.node_selector)}
                ]
            }
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        return {
            "metadata": {"labels": {"app": k8s_name(d.id), names.DEPLOY_ID: d.id}},
            "spec": spec,
        }

    def _deploy(self, d: DeploySpec) -> None:
        ns, name = self.layout.namespace_of(d, self.reservations), k8s_name(d.id)
        labels = {names.DEPLOY_ID: d.id}
        if d.project:
            labels[names.PROJECT] = d.project
        if d.endpoint:
            labels[names.ENDPOINT] = d.endpoint
        notes = {names.REPLICAS: str(d.replicas)}
        if d.aliases:
            notes[names.ALIASES] = ",".join(d.aliases)
        if d.reservation is not None:
            notes[names.RESERVATION] = d.reservation.model_dump_json()
        meta = {"name": name, "namespace": ns, "labels": labels, "annotations": notes}
        replicas = d.replicas if d.state == "running" else 0
        template = self.template(d)
        if d.reservation is not None:
            template = self._rendered(d, template, ns)
        if d.nodes_per_replica > 1:
            body: Obj = {
                "apiVersion": f"{names.LWS_GROUP}/{names.LWS_VERSION}",
                "kind": "LeaderWorkerSet",
                "metadata": meta,
                "spec": {
                    "replicas": replicas,
                    "leaderWorkerTemplate": {
                        "size": d.nodes_per_replica,
                        "workerTemplate": self.template(d),
                    },
                },
            }
            self.kube.call(
                self.kube.custom.create_namespaced_custom_object,
                names.LWS_GROUP,
                names.LWS_VERSION,
                ns,
                names.LWS_PLURAL,
                body,
                what=f"create lws {name}",
                mutating=True,
            )
            self.workloads[d.id] = ("LeaderWorkerSet", ns, name)
            return
        body = {  # as tenants write them: an app: selector, the default RollingUpdate strategy
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": self.template(d),
            },
        }
        self.kube.call(
            self.kube.apps.create_namespaced_deployment,
            ns,
            body,
            what=f"create {name}",
            mutating=True,
        )
        self.workloads[d.id] = ("Deployment", ns, name)
        if d.hpa:
            hpa = {
                "apiVersion": "autoscaling/v1",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "targetCPUUtilizationPercentage": 80,
                },
            }
            self.kube.call(
                self.kube.autoscaling.create_namespaced_horizontal_pod_autoscaler,
                ns,
                hpa,
                what="create hpa",
                mutating=True,
            )

    def _rendered(self, d: DeploySpec, template: Obj, ns: str) -> Obj:
        """A bound deploy's template as the product renders it at start (Track S), so that a deploy
        the pool declares running runs where its reservation is."""
        policy = kai.SchedulingPolicy(scheduler_name=KAI_SCHEDULER)
        binding = d.binding()
        if isinstance(binding, TimeSlicedBinding):
            rsv = self.reservations[binding.reservation]
            out = kai.render_member_pod(
                template,
                reservation=rsv,
                deploy_id=d.id,
                project=d.project or ns,
                memory_mib=binding.memory_mib,
                policy=policy,
            )
            meta = {
                k: v for k, v in out.manifest["metadata"].items() if k in ("labels", "annotations")
            }
            return {"metadata": meta, "spec": out.manifest["spec"]}
        assert binding is not None
        rsvs = [self.reservations[r] for r in binding.reservations if r in self.reservations]
        return exclusive_template(template, rsvs, project=d.project or ns, policy=policy)

    # -- foreign workloads -------------------------------------------------------------------------

    def add_foreign(
        self,
        workload_id: str,
        gpus: int,
        kind: str,
        *,
        node: str | None = None,
        flavor: str | None = None,
    ) -> None:
        """``static``: one pod holding ``gpus`` now; ``intruder``: ``gpus`` 1-GPU pods that grab
        free GPUs as they appear."""
        selector = {POOL_LABEL: self.layout.prefix}
        if node:
            selector[names.HOSTNAME] = node
        if flavor:
            selector[names.GPU_PRODUCT] = flavor
        labels = {FOREIGN_LABEL: k8s_name(workload_id)}
        spec = {
            "terminationGracePeriodSeconds": int(self.spec.sim.timings.stop_grace_s),
            "nodeSelector": selector,
            "automountServiceAccountToken": False,
        }
        name = k8s_name(f"foreign-{workload_id}")
        if kind == "static":
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {**spec, "containers": [container(gpus)]},
            }
            self.kube.call(
                self.kube.core.create_namespaced_pod,
                self.layout.admin,
                body,
                what="create foreign pod",
                mutating=True,
            )
            return
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": gpus,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {**spec, "containers": [container(1)]},
                },
            },
        }
        self.kube.call(
            self.kube.apps.create_namespaced_deployment,
            self.layout.admin,
            body,
            what="create intruder",
            mutating=True,
        )

    def remove_foreign(self, workload_id: str) -> None:
        name = k8s_name(f"foreign-{workload_id}")
        for fn in (
            self.kube.core.delete_namespaced_pod,
            self.kube.apps.delete_namespaced_deployment,
        ):
            try:
                self.kube.call(fn, name, self.layout.admin, what=f"delete {name}", mutating=True)
                return
            except NotFound:
                continue
        raise NotFound(f"no foreign workload {workload_id!r}")

    # -- teardown ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Delete the namespaces and force the pods out (no kubelet confirms), then the nodes."""
        for ns in (*self.namespaces, self.layout.system):
            with contextlib.suppress(NotFound):
                self.kube.call(
                    self.kube.core.delete_namespace,
                    ns,
                    what=f"delete namespace {ns}",
                    mutating=True,
                )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = [p for p in self.sim._bound_pods()] + [
                p
                for ns in self.namespaces
                for p in self.kube.items(self.kube.core.list_namespaced_pod, ns, what="list pods")
            ]
            if not left:
                break
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
            time.sleep(0.1)
        self.sim.close(delete_nodes=True)


class Driver:
    """Calls the fakes' steps every ``every_s`` seconds until stopped; keeps the last errors."""

    def __init__(self, steps: Sequence[Any], every_s: float) -> None:
        self.steps, self.every_s = list(steps), every_s
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gps-fake-cluster", daemon=True)

    def start(self) -> Driver:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for step in self.steps:
                try:
                    step()
                except CoreError as exc:  # the API server may be busy or stopping: next round
                    self.errors = [*self.errors[-20:], str(exc)]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def container(gpus: int) -> Obj:
    requests: dict[str, str] = {"cpu": "10m", "memory": "16Mi"}
    limits: dict[str, str] = {}
    if gpus:
        requests[names.GPU] = limits[names.GPU] = str(gpus)
    return {"name": "serve", "image": IMAGE, "resources": {"requests": requests, "limits": limits}}


def wait_quotas_counted(kube: Kube, namespaces: Sequence[str], *, timeout_s: float = 30) -> None:
    """Until the quota controller has computed a new ResourceQuota's status, pods created in its
    namespace may never be counted (its first sync can miss them); wait for ``status.hard``."""
    deadline = time.monotonic() + timeout_s
    for ns in namespaces:
        while True:
            quotas = kube.items(kube.core.list_namespaced_resource_quota, ns, what="list quotas")
            if all((q.get("status") or {}).get("hard") for q in quotas):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"ResourceQuota status in {ns} not computed after {timeout_s} s")
            time.sleep(0.05)


def wait_default_tokens(kube: Kube, namespaces: Sequence[str], *, timeout_s: float = 30) -> None:
    """Kubernetes 1.20 refuses pods in a namespace until its ``default-token-*`` Secret exists."""
    deadline = time.monotonic() + timeout_s
    pending = list(namespaces)
    while pending:
        ns = pending[0]
        secrets = kube.items(kube.core.list_namespaced_secret, ns, what=f"list secrets in {ns}")
        if any(s["metadata"]["name"].startswith("default-token-") for s in secrets):
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default-token Secret in {ns} after {timeout_s} s")
        time.sleep(0.05)
