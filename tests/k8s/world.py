"""The real engine against the real API server: a world for end-to-end tests on the cluster.

Store (a real database) + ``K8sCore`` + the engine with its GPS hooks, on one virtual clock. The
fake kubelets follow that clock; the control plane reacts in wall time and is let settle at every
instant the world stops at. At each settled instant the world checks the invariant the product
exists for — no node has more GPUs requested by live pods than it can allocate, and no GPU UUID
is handed to two pods — and records what every node holds, so a test can assert on the history.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.backends.k8s import K8sCore, ledger, names, pods
from gps_dagster.backends.k8s.capacity import allocatable_gpus, node_name
from gps_dagster.backends.k8s.workloads import read
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.evaluator import next_boundary
from gps_dagster.domain.pool import PoolSpec, load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import Engine, EngineConfig, PassReport
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.ports import DeployView
from gps_dagster.store import Store
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s.layout import layout, remap
from gps_dagster.testing.k8s.pools import ClusterPool
from tests.k8s.cluster import kube, unique


@dataclass
class Sample:
    at: datetime
    by_node: dict[str, dict[str, int]]
    """node → holder (deploy id, or pod name) → GPUs requested by its live pods."""


@dataclass
class K8sWorld:
    clock: VirtualClock
    store: Store
    cluster: ClusterPool
    core: K8sCore
    engine: Engine
    spec: Schedule
    pool_spec: PoolSpec
    samples: list[Sample] = field(default_factory=list)

    # -- time --------------------------------------------------------------------------------------

    def settle(self) -> None:
        self.cluster.settle()
        self.check()

    def advance_to(self, instant: datetime) -> None:
        """Move the clock to ``instant`` through every fake-kubelet event on the way."""
        for _ in range(10_000):
            nxt = self.cluster.sim.next_event_at()
            if nxt is None or nxt > instant:
                break
            if nxt > self.clock.now():
                self.clock.set(nxt)
            self.settle()
        if instant > self.clock.now():
            self.clock.set(instant)
        self.settle()

    def tick(self, seconds: float = 30) -> PassReport:
        report = self.engine.run_pass()
        self.settle()
        self.advance_to(self.clock.now() + timedelta(seconds=seconds))
        return report

    def run_until(self, until: datetime, *, every: float = 30) -> list[PassReport]:
        reports = []
        while self.clock.now() < until:
            reports.append(self.tick(every))
        return reports

    def drive(self, until: datetime, *, every: float = 30) -> int:
        """Passes every ``every`` s while a step is in flight, else woken at the next boundary."""
        passes = 0
        while self.clock.now() < until:
            self.engine.run_pass()
            passes += 1
            self.settle()
            busy = self.store.list_actions(
                states=("pending", "capacity_wait", "submitting", "accepted")
            )
            nxt = self.clock.now() + timedelta(seconds=every)
            if not busy:
                nxt = next_boundary(self.spec, self.clock.now()) or until
            self.advance_to(min(nxt, until))
        return passes

    # -- reads -------------------------------------------------------------------------------------

    def status(self, target: str) -> TargetStatusRow:
        row = self.store.get_status(self.spec.name, target)
        assert row is not None, f"no status for {target}"
        return row

    def deploy(self, target: str) -> DeployView:
        return self.core.get_deploy(target)

    def operations(self, deploy: str | None = None) -> list[tuple[str, str, str]]:
        """(deploy, kind, key) of every mutation recorded in the workloads' ledgers, in order."""
        out = []
        for dep, (kind, ns, name) in self.cluster.workloads.items():
            if deploy is None or dep == deploy:
                w = read(self.cluster.kube, kind, ns, name)
                out += [(e.at, e.seq, dep, e.kind, e.key) for e in ledger.read(w).entries]
        return [(d, k, key) for _, _, d, k, key in sorted(out)]

    def nodes_of(self, deploy: str) -> set[str]:
        return {n for s in self.samples[-1:] for n, held in s.by_node.items() if held.get(deploy)}

    def close(self) -> None:
        self.cluster.close()
        self.store.engine.dispose()

    # -- the invariant -----------------------------------------------------------------------------

    def check(self) -> None:
        api = self.cluster.kube
        nodes = {
            node_name(n): n
            for n in api.items(api.core.list_node, what="nodes")
            if node_name(n) in self.cluster.sim.nodes
        }
        bound = pods.holding(
            api.items(
                api.core.list_pod_for_all_namespaces,
                field_selector="spec.nodeName!=",
                what="bound pods",
            )
        )
        by_node: dict[str, dict[str, int]] = {n: {} for n in nodes}
        owners: dict[str, str] = {}
        for p in bound:
            where = str(pods.node(p))
            if where not in nodes:
                continue
            holder = pods.labels(p).get(names.DEPLOY_ID) or pods.name(p)
            by_node[where][holder] = by_node[where].get(holder, 0) + pods.gpus(p)
            for u in pods.devices(p) if pods.gpus(p) else ():
                assert owners.setdefault(u, pods.name(p)) == pods.name(p), (
                    f"GPU {u} given to two pods"
                )
        for name, held in by_node.items():
            total, limit = sum(held.values()), allocatable_gpus(nodes[name])
            assert total <= limit, (
                f"overcommit on {name} at {self.clock.now()}: {held} > allocatable {limit}"
            )
        self.samples.append(Sample(self.clock.now(), by_node))


def rename_nodes(pool: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The pool with node names made unique to this test (a cluster's nodes are shared)."""
    doc = copy.deepcopy(pool)
    rename = {n["name"]: f"{prefix}-{n['name']}" for n in doc["nodes"]}
    original = load_pool(pool)
    uuids = {
        n.name: list(original.uuids(n)) for n in original.nodes
    }  # kept: reservations name them
    for n in doc["nodes"]:
        n["gpu_uuids"] = uuids[n["name"]]
        n["name"] = rename[n["name"]]
    for d in doc.get("deploys", []):
        d["node_selector"] = [rename[x] for x in d.get("node_selector", [])]
    for r in doc.get("reservations", []):
        r["node"] = rename[r["node"]]
    for f in doc.get("sim", {}).get("foreign", []):
        if f.get("node"):
            f["node"] = rename[f["node"]]
    return doc


def make_world(
    db_url: str,
    *,
    schedule: dict[str, Any],
    pool: dict[str, Any],
    start: datetime,
    config: EngineConfig | None = None,
    gate: str = "enforce",
) -> K8sWorld:
    clock = VirtualClock(start)
    store = Store.open(db_url)
    prefix = unique("e")
    pool_spec = load_pool(rename_nodes(pool, prefix))
    reservations = remap(pool_spec, layout(pool_spec, prefix), start)
    if reservations:
        ensure_tables(store.engine)
        repo = ReservationRepository(store.engine)
        for r in reservations:
            repo.create(r.spec(), at=start, actor="e2e")
    admin = kube()
    cluster = ClusterPool(
        admin, clock, pool_spec, prefix=prefix, reservations=reservations
    ).create()
    core = K8sCore(
        kube(),
        clock=clock,
        namespaces=cluster.namespaces,
        store_engine=store.engine,
        policy_namespace=cluster.layout.system,
    )
    spec = load_schedule(copy.deepcopy(schedule))
    store.apply_schedule(spec, now=start)
    store.set_gate(gate, now=start)
    engine = Engine(store, core, clock, config or EngineConfig(), **hooks(store, core))
    world = K8sWorld(clock, store, cluster, core, engine, spec, pool_spec)
    world.check()
    return world
