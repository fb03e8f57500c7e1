"""Test support for the real control plane: a harness for the Core contract suite, and faults.

``K8sHarness`` builds a contract pool on the cluster (``fake.pools.ClusterPool``), hands out the
real ``K8sCore`` and moves a virtual clock: ``advance`` steps through the node simulator's events
(grace periods, publish lag, start delays) and lets the cluster settle at each, so "30 s later"
takes milliseconds and never depends on the wall clock. The Core it returns is the adapter behind
a thin proxy that only (1) tells the fault layer which port call is running and (2) lets the
cluster react after a mutation — the virtual instant does not move while controllers work.

Faults are injected where they would happen on a cluster, under the adapter:

* at the HTTP transport of the adapter's client (``FaultLayer``): the API server answering 503 or
  400 (``fail_next``), an answer lost after a PATCH was applied (``lose_response``), the process
  dying before or after the PATCH (``crash``), Services unreadable (``alias_guard_*``), a PATCH
  refused by admission (``fail_start`` / ``fail_stop``);
* in the cluster itself: a pod template no node matches (``unschedulable``), a Deployment past
  its progress deadline (``failed``), a finalizer holding a deleted Deployment (``deleting``),
  pods the fake kubelet never readies (``never_ready``) or gives wrong UUIDs (``misplace``).

Contract pools use fixed node names (``hgx-01``, ``n1`` …), so contract harnesses of the two
pytest workers take turns through a file lock; other tests use unique node names.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import urllib3
from kubernetes.client.exceptions import ApiException

from gps_dagster.backends.k8s import K8sCore, Kube, connect, ledger
from gps_dagster.backends.k8s.workloads import read
from gps_dagster.backends.sim import SimulatedCrash
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import ONE_SHOT_EFFECTS, FaultSpec, PoolSpec
from gps_dagster.ports import Core, Operation, Submission, submit_each
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s import nodes as fnodes
from gps_dagster.testing.k8s.layout import layout, remap
from gps_dagster.testing.k8s.pools import ClusterPool

MUTATIONS = ("stop", "start", "set_replica_intent")
T0_K8S = datetime(2026, 10, 19, 10, 0, tzinfo=UTC)
FAULT_KEY = "gps.dagster.io/fault"
HOLD = "gps.dagster.io/test-hold"


def kubeconfig() -> str:
    path = os.environ.get("GPS_TEST_KUBECONFIG")
    if not path:
        raise RuntimeError(
            "GPS_TEST_KUBECONFIG is not set: use the k8s_cluster fixture or tools/with_k8s.py"
        )
    return path


def kube(path: str | None = None) -> Kube:
    return Kube(connect(path or kubeconfig(), None))


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:7]}"


@dataclass
class Hit:
    fault: FaultSpec
    fired: bool = False


class FaultLayer:
    """Wraps the REST client of one ``ApiClient``; faults fire on the running call's requests."""

    def __init__(self, api: Kube) -> None:
        self.rest = api.api_client.rest_client
        self.original: Callable[..., Any] = self.rest.request
        self.rest.request = self.request
        self.one_shots: list[list[Any]] = []
        """[fault, calls left]"""
        self.persistent: list[FaultSpec] = []
        self.call: tuple[str, str | None] | None = None
        self.hits: list[Hit] = []
        self._first = True

    def begin(self, op: str, deploy: str | None) -> None:
        self.call, self._first, self.hits = (op, deploy), True, []
        for item in self.one_shots:
            fault, left = item
            if left > 0 and fault.op == op and (fault.deploy is None or fault.deploy == deploy):
                item[1] -= 1
                self.hits.append(Hit(fault))

    def end(self) -> None:
        self.call, self.hits = None, []

    def _matches(self, fault: FaultSpec) -> bool:
        return self.call is not None and (fault.deploy is None or fault.deploy == self.call[1])

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        first, self._first = self._first, False
        workload_patch = method == "PATCH" and (
            "/deployments/" in url or "/leaderworkersets/" in url
        )
        for hit in self.hits:
            if hit.fired:
                continue
            f = hit.fault
            if f.effect == "fail_next" and first:
                hit.fired = True
                raise _api_error(503 if f.error == "transient" else 400, "injected failure")
            if f.effect == "crash" and (
                (f.point == "before_mutation" and first)
                or (f.point == "before_commit" and workload_patch)
            ):
                hit.fired = True
                raise SimulatedCrash(f.point, f.op or "?")
        self._persistent_faults(method, url, workload_patch)
        response = self.original(method, url, *args, **kwargs)
        for hit in self.hits:
            if not hit.fired and workload_patch and hit.fault.effect in ("crash", "lose_response"):
                hit.fired = True
                if hit.fault.effect == "crash":
                    raise SimulatedCrash("after_commit", hit.fault.op or "?")
                raise urllib3.exceptions.ProtocolError(
                    "Connection aborted.", ConnectionResetError("injected")
                )
        return response

    def _persistent_faults(self, method: str, url: str, workload_patch: bool) -> None:
        for f in self.persistent:
            if not self._matches(f):
                continue
            if f.effect == "alias_guard_unwired" and method == "GET" and "/services" in url:
                raise _api_error(
                    403, 'services is forbidden: User "gps-adapter" cannot list resource "services"'
                )
            if f.effect == "alias_guard_error" and method == "GET" and "/services" in url:
                raise _api_error(500, "etcdserver: request timed out")
            op = self.call[0] if self.call else ""
            if workload_patch and (f.effect, op) in (
                ("fail_start", "start"),
                ("fail_stop", "stop"),
            ):
                raise _api_error(
                    422, f"admission webhook denied the request: {op} of {f.deploy} is broken"
                )


def _api_error(status: int, message: str) -> ApiException:
    err = ApiException(status=status, reason=message)
    err.body = json.dumps(
        {"kind": "Status", "status": "Failure", "message": message, "code": status}
    ).encode()
    return err


class SettlingCore:
    """The adapter, plus: fault bookkeeping per call, and a settled cluster after each mutation."""

    def __init__(self, core: K8sCore, harness: K8sHarness) -> None:
        self._core, self._harness = core, harness

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        return submit_each(self, submissions)  # every call through this wrapper

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._core, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            deploy = args[0] if args and isinstance(args[0], str) else None
            self._harness.faults.begin(name, deploy)
            try:
                return target(*args, **kwargs)
            finally:
                self._harness.faults.end()
                if name in MUTATIONS:
                    self._harness.settle()

        return call


class K8sHarness:
    """The contract ``Harness`` on the real control plane (see the module docstring)."""

    def __init__(
        self, db_url: str, *, kubeconfig_path: str | None = None, t0: datetime | None = None
    ) -> None:
        from contract_harness import T0  # the contract suite's start instant

        self.clock = VirtualClock(t0 or T0)
        self.engine = create_db_engine(db_url)
        self.kubeconfig = kubeconfig_path or kubeconfig()
        self.admin = kube(self.kubeconfig)
        self.adapter_kube = kube(self.kubeconfig)
        """The adapter's own client: faults are injected into its transport only."""
        self.faults = FaultLayer(self.adapter_kube)
        self.pool: ClusterPool | None = None
        self.core: K8sCore | None = None
        self._lock: Any = None

    def load(self, spec: PoolSpec) -> Core:
        self._take_node_lock()
        ensure_tables(self.engine)
        prefix = unique("c")
        reservations = remap(spec, layout(spec, prefix), self.clock.now())
        repo = ReservationRepository(self.engine)
        for r in reservations:
            repo.create(r.spec(), at=self.clock.now(), actor="contract")
        stale = [n.name for n in spec.nodes]  # left by a run that died holding the lock
        fnodes.unregister(self.admin, stale)
        self.pool = ClusterPool(
            self.admin, self.clock, spec, prefix=prefix, reservations=reservations
        )
        self.pool.create()
        self.core = K8sCore(
            self.adapter_kube,
            clock=self.clock,
            namespaces=self.pool.namespaces,
            ledger=ReservationRepository(self.engine),
            policy_namespace=self.pool.layout.system,
        )
        return SettlingCore(self.core, self)  # type: ignore[return-value]

    def _take_node_lock(self) -> None:
        digest = hashlib.sha1(self.kubeconfig.encode()).hexdigest()[:10]
        path = Path(tempfile.gettempdir()) / f"gps-k8s-contract-nodes-{digest}.lock"
        self._lock = open(path, "w")  # noqa: SIM115 - held until close()
        fcntl.flock(self._lock, fcntl.LOCK_EX)

    @property
    def cluster(self) -> ClusterPool:
        assert self.pool is not None, "load() first"
        return self.pool

    def settle(self) -> None:
        if self.pool is not None:
            self.pool.settle()

    def advance(self, seconds: float) -> None:
        target = self.clock.now().timestamp() + seconds
        for _ in range(10_000):
            nxt = self.cluster.sim.next_event_at()
            if nxt is None or nxt.timestamp() > target:
                break
            if nxt > self.clock.now():
                self.clock.set(nxt)
            self.settle()
        self.clock.advance(max(target - self.clock.now().timestamp(), 0.0))
        self.settle()

    def eventually(self, check: Callable[[], object], *, within_s: float) -> None:
        from contract_harness import at_the_instant

        at_the_instant(self, check, within_s)

    # -- faults ------------------------------------------------------------------------------------

    def inject(self, fault: FaultSpec) -> None:
        if fault.effect in ONE_SHOT_EFFECTS:
            self.faults.one_shots.append([fault, fault.times])
        elif fault.effect in (
            "alias_guard_unwired",
            "alias_guard_error",
            "fail_start",
            "fail_stop",
        ):
            self.faults.persistent.append(fault)
        elif fault.effect == "never_ready":
            self.cluster.sim.never_ready.add(str(fault.deploy))
        elif fault.effect == "misplace":
            self.cluster.sim.misplace.add(str(fault.deploy))
        elif fault.effect == "unschedulable":
            self._patch_workload(
                str(fault.deploy),
                {"spec": {"template": {"spec": {"nodeSelector": {FAULT_KEY: "unschedulable"}}}}},
            )
        elif fault.effect == "failed":
            self._fail_rollout(str(fault.deploy))
        elif fault.effect == "deleting":
            self._hold_deleted(str(fault.deploy))
        else:
            raise ValueError(f"fault {fault.effect} has no Kubernetes form")
        self.settle()

    def _workload(self, deploy: str) -> tuple[str, str, str]:
        return self.cluster.workloads[deploy]

    def _patch_workload(self, deploy: str, body: dict[str, Any]) -> None:
        _, ns, name = self._workload(deploy)
        self.admin.merge_patch(
            self.admin.apps.patch_namespaced_deployment, name, ns, body=body, what="fault"
        )

    def _fail_rollout(self, deploy: str) -> None:
        """A real ProgressDeadlineExceeded: a replica that cannot be placed, a 1 s deadline."""
        self._patch_workload(
            deploy,
            {
                "spec": {
                    "replicas": 1,
                    "progressDeadlineSeconds": 1,
                    "template": {"spec": {"nodeSelector": {FAULT_KEY: "failed"}}},
                }
            },
        )
        _, ns, name = self._workload(deploy)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            obj = self.admin.call(self.admin.apps.read_namespaced_deployment, name, ns, what="read")
            conds = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("reason") == "ProgressDeadlineExceeded" for c in conds):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{deploy} did not exceed its progress deadline")

    def _hold_deleted(self, deploy: str) -> None:
        self._patch_workload(deploy, {"metadata": {"finalizers": [HOLD]}})
        _, ns, name = self._workload(deploy)
        self.admin.call(
            self.admin.apps.delete_namespaced_deployment, name, ns, what="delete", mutating=True
        )

    def add_foreign(self, workload_id: str, gpus: int, kind: Literal["static", "intruder"]) -> None:
        self.cluster.add_foreign(workload_id, gpus, kind)
        self.settle()

    def remove_foreign(self, workload_id: str) -> None:
        self.cluster.remove_foreign(workload_id)
        self.settle()

    def mutations(self, deploy_id: str) -> int:
        kind, ns, name = self._workload(deploy_id)
        return len(ledger.read(read(self.admin, kind, ns, name)).entries)

    def close(self) -> None:
        try:
            if self.pool is not None:
                for deploy, (kind, ns, name) in self.pool.workloads.items():
                    if kind == "Deployment":
                        with suppress(Exception):
                            self.admin.merge_patch(
                                self.admin.apps.patch_namespaced_deployment,
                                name,
                                ns,
                                body={"metadata": {"finalizers": None}},
                                what=f"unhold {deploy}",
                            )
                self.pool.close()
        finally:
            self.engine.dispose()
            if self._lock is not None:
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
