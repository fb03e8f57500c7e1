"""The real engine against the real API server, as in production: a world for end-to-end tests.

Store (a real database) + ``K8sCore`` + the engine with its GPS hooks. Nothing here waits for the
cluster to be quiet (no ``settle()``): three things run at once, as on a real cluster,

* the real ``EngineLoop`` on its own thread, with its own cadence (``pass_interval_s``, woken
  earlier by the due index: boundaries, follow-ups of steps in flight, ready-by early starts);
* the fakes (fake kubelets, KAI binder, LWS controller) on another thread, round after round at
  the clock's now, while the real scheduler and controllers react in wall time;
* the test, which only changes the world (deploy, stop, delete a pod, move time) and waits,
  bounded and by polling with a deadline, for what it can observe (store, pods, workloads).

Time: one ``VirtualClock`` read by the engine and the fakes; only the test moves it, and only
while the engine loop sleeps (its sleeper waits for the clock to reach its wake-up instant).
Each move goes to the earliest of the loop's wake-up, the next fake-kubelet event, ``max_step_s``
and the test's target, and is followed by one full round of the fakes at the new instant — so a
pass can meet any intermediate state: pods Terminating, a ReplicaSet not yet scaled, a status
not yet observed. Before a move the clock waits for the real controllers to owe nothing (the
scheduler's verdicts, the ReplicaSet and Deployment controllers' pods and statuses): passes run
meanwhile, so they see the cluster move, but a loaded machine cannot turn a controller's seconds
into virtual minutes. Wall-clock time only bounds the waits; no outcome depends on it.

Every round of the fakes also checks the invariant the product exists for — no node has more
GPUs requested by live pods than it can allocate, and no GPU UUID is handed to two pods — and
records what every node holds, so a test can assert on the history. A failure there, in a fake
or in a pass, is raised in the test at its next call into the world.
"""
# Decisions embodied here (docs/decisions.md):
# * “End-to-end tests on the cluster: the engine's own loop, time moved by the test”
# * “The end-to-end clock waits for the workload controllers, not for quiet”

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.backends.k8s import ClusterCache, K8sCore, Kube, ledger, names, pods
from gps_dagster.backends.k8s.capacity import allocatable_gpus, node_name
from gps_dagster.backends.k8s.workloads import read
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import PoolSpec, load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine import Engine, EngineConfig, PassReport
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.ports import CoreError, DeployView
from gps_dagster.store import Store
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s.layout import layout, remap
from gps_dagster.testing.k8s.pools import ClusterPool
from gps_dagster.testing.k8s.settle import controllers_behind, pending_verdicts
from tests.k8s.cluster import kube, unique


@dataclass
class Sample:
    at: datetime
    by_node: dict[str, dict[str, int]]
    """node → holder (deploy id, or pod name) → GPUs requested by its live pods."""


class WorldFailed(AssertionError):
    """The invariant broke, a fake raised, or a pass raised: on the world's threads."""


class Stuck(AssertionError):
    """A bounded wait ran out (wall-clock deadline) before what the test waits for happened."""


Step = Callable[[], object]


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
    max_step_s: float | None = 30.0
    """The longest single move of the clock (None: straight to the loop's next wake-up)."""
    wall_timeout_s: float = 120.0
    """Wall-clock bound of one wait (an engine pass, a round of the fakes, a condition)."""
    reports: list[PassReport] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    extra_steps: list[Step] = field(default_factory=list)
    """Other fakes run every round (e.g. a fake cluster-autoscaler), after the pool's own."""
    wakeup: Wakeup | None = None
    """The engine loop's wake-up (the core's watch cache notifies it), as ``engine run`` wires."""

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._fakes_lock = threading.Lock()
        self._halt = threading.Event()
        self._kick = threading.Event()
        self._started_rounds = 0
        self._done_rounds = 0
        self._wake_at: datetime | None = None
        """The loop's wake-up instant while it sleeps; None while a pass runs."""
        if self.wakeup is not None:
            self.wakeup.on_notify = self._notify
        self.loop = EngineLoop(
            self.engine,
            clock=self.clock,
            sleeper=self._sleep,
            wakeup=self.wakeup,
            interval_s=self.engine.config.pass_interval_s,
            on_pass=self.reports.append,
            on_error=lambda exc: self._fail(f"engine pass raised {type(exc).__name__}: {exc}"),
        )
        self._fakes = threading.Thread(target=self._run_fakes, name="e2e-fakes", daemon=True)
        self._engine = threading.Thread(target=self.loop.run, name="e2e-engine", daemon=True)
        self._fakes.start()

    @property
    def settle(self) -> None:  # pragma: no cover - the guard itself
        """End-to-end tests never settle the cluster (tests/k8s/test_e2e_no_settle.py)."""
        raise AttributeError(
            "K8sWorld is end-to-end: the engine runs on its own loop while the cluster moves; "
            "wait for an observable outcome (wait_for) instead of settling the cluster"
        )

    # -- the threads -------------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        with self._cond:
            self.failures.append(what)
            self._cond.notify_all()

    def _run_fakes(self) -> None:
        while not self._halt.is_set():
            with self._cond:
                self._started_rounds += 1
                number = self._started_rounds
            try:
                with self._fakes_lock:
                    for step in [*self.cluster.steps(), *self.extra_steps]:
                        step()
                    self.check()
            except CoreError:
                pass  # the API server may be busy: the next round tries again, as a controller
            except Exception as exc:  # the invariant, or a fake's defect: the test fails
                self._fail(f"{type(exc).__name__}: {exc}")
            with self._cond:
                self._done_rounds = number
                self._cond.notify_all()
            self._kick.wait(0.05)
            self._kick.clear()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _sleep(self, seconds: float) -> None:
        """The engine loop's sleeper: until the clock (moved by the test) reaches the wake-up,
        or the wake-up (a watch event) says a deploy changed."""
        woken = self.wakeup.pending if self.wakeup is not None else lambda: False
        with self._cond:
            wake = self.clock.now() + timedelta(seconds=seconds)
            self._wake_at = wake
            self._cond.notify_all()
            while not self.loop.stopping and self.clock.now() < wake and not woken():
                self._cond.wait(0.5)
            self._wake_at = None

    def _raise_failures(self) -> None:
        if self.failures:
            raise WorldFailed("; ".join(self.failures[:5]))

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        """Under the condition: until ``ready()`` or a failure, at most ``wall_timeout_s``."""
        deadline = time.monotonic() + self.wall_timeout_s
        while not ready():
            self._raise_failures()
            left = deadline - time.monotonic()
            if left <= 0:
                raise Stuck(f"{what}: not within {self.wall_timeout_s} s (at {self.clock.now()})")
            self._cond.wait(min(left, 0.5))
        self._raise_failures()

    def _engine_asleep(self) -> None:
        """Until the loop sleeps towards an instant still ahead (a pass has not just woken)."""
        if not self._engine.is_alive() and not self.loop.stopping:
            self._engine.start()
        with self._cond:
            self._wait(
                lambda: self._wake_at is not None and self._wake_at > self.clock.now(),
                "the engine loop going back to sleep",
            )

    def _controllers_caught_up(self) -> None:
        """Until the real controllers owe nothing for what they were given, before the clock
        moves on: the scheduler has judged every pending pod and bound each that fits (its
        backoff, 1-10 s, and flush, 60 s, run on wall time), and the ReplicaSet and Deployment
        controllers have observed their generations, made their pods (or been refused them) and
        counted them in their statuses. In production they react in milliseconds, far below
        every grace the engine applies; on a loaded machine they lag seconds of wall time, which
        a clock moved on meanwhile turned into minutes (a start "not ready by 18:12"). Passes
        still run while they move (a watch event wakes the loop at the same instant), so every
        intermediate state is seen; only the clock waits (decisions 179, 220)."""
        kube, spaces = self.cluster.kube, self.cluster.namespaces
        deadline = time.monotonic() + self.wall_timeout_s
        while True:
            self._raise_failures()
            by_ns = {ns: kube.items(kube.core.list_namespaced_pod, ns, what="p") for ns in spaces}
            waiting = pending_verdicts(kube, [p for ours in by_ns.values() for p in ours])
            for ns, ours in by_ns.items():
                waiting = waiting or controllers_behind(kube, ns, ours)
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise Stuck(f"the controllers still owe {waiting[:3]} (at {self.clock.now()})")
            with self._cond:
                self._cond.wait(0.05)

    def _step_towards(self, until: datetime) -> None:
        """Move the clock one step towards ``until`` (``_next``), then let the fakes run a
        round. The move is made only while the loop sleeps with no watch event pending, decided
        under the condition the loop's sleeper holds: a loop a watch event woke in the meantime
        (its ``_wake_at`` is None while it hastens and passes) must not see the clock jump to
        ``until`` past boundaries it never slept towards — it passes first, then this retries."""
        with self._fakes_lock:
            event = self.cluster.sim.next_event_at()
        with self._cond:
            now = self.clock.now()
            woken = self.wakeup is not None and self.wakeup.pending()
            if self._wake_at is None or self._wake_at <= now or woken:
                return
            self.clock.set(self._next(now, until, event))
            target = self._started_rounds + 1
            self._cond.notify_all()
        self._kick.set()
        with self._cond:
            self._wait(lambda: self._done_rounds >= target, "a round of the fakes")

    # -- time --------------------------------------------------------------------------------------

    def _next(self, now: datetime, until: datetime, event: datetime | None) -> datetime:
        """The earliest of ``until``, the loop's wake-up, the next fake event and ``max_step_s``."""
        cands = [until, self._wake_at]
        if event is not None and event > now:
            cands.append(event)
        if self.max_step_s is not None:
            cands.append(now + timedelta(seconds=self.max_step_s))
        return min(c for c in cands if c is not None and c > now)

    def advance_to(self, instant: datetime) -> None:
        """Move the clock to ``instant``; the engine's loop passes on its own on the way."""
        while self.clock.now() < instant:
            self._engine_asleep()
            self._controllers_caught_up()
            self._step_towards(instant)
        self._engine_asleep()

    def tick(self, seconds: float = 30) -> None:
        self.advance_to(self.clock.now() + timedelta(seconds=seconds))

    run_until = advance_to
    drive = advance_to

    def wait_for(
        self, done: Callable[[], bool], what: str, *, by: datetime | None = None
    ) -> datetime:
        """Let time run (as ``advance_to``) until ``done()``, at the latest by virtual ``by``;
        returns the virtual instant it was seen. Fails naming ``what`` otherwise."""
        self._engine_asleep()
        while not done():
            if by is not None and self.clock.now() >= by:
                raise AssertionError(f"{what}: not by {by} (now {self.clock.now()})")
            self._controllers_caught_up()
            self._step_towards(by or self.clock.now() + timedelta(days=7))
            self._engine_asleep()
        return self.clock.now()

    def until_quiet_wall(self, done: Callable[[], bool], what: str) -> None:
        """Wait in wall time only (the clock stays): for a controller's reaction the test needs
        before it changes the world again (e.g. a quota counted, a pod judged Unschedulable)."""
        deadline = time.monotonic() + self.wall_timeout_s
        while not done():
            self._raise_failures()
            if time.monotonic() > deadline:
                raise Stuck(f"{what}: not within {self.wall_timeout_s} s")
            self._kick.set()
            with self._cond:
                self._cond.wait(0.05)

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
        """Where ``deploy``'s live pods are bound now (a fresh look, not the last round's)."""
        with self._fakes_lock:
            self.check()
            last = self.samples[-1]
        return {n for n, held in last.by_node.items() if held.get(deploy)}

    def close(self) -> None:
        self.loop.stop()
        with self._cond:
            self._cond.notify_all()
        if self._engine.is_alive():
            self._engine.join(timeout=30)
        self._halt.set()
        self._kick.set()
        self._fakes.join(timeout=30)
        self.core.close()
        try:
            self.cluster.close()
        finally:
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
    max_step_s: float | None = 30.0,
    follow_up_s: float = 10.0,
    core_kube: Kube | None = None,
    cache: bool = True,
) -> K8sWorld:
    """The pool laid out and let settle once (the cluster as the engine finds it when it is
    installed), then the world's threads; the engine loop starts when the test first moves time.
    ``core_kube`` is the engine's own client (another identity or API server); the fakes and
    the world's reads keep the admin client of the first API server. ``cache`` (on, as in
    production): the core reads from a watch cache that also wakes the engine loop (as
    ``build_core`` and ``engine run`` wire it); off, every read is a LIST."""
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
    core_client = core_kube or kube()
    watch = None
    wakeup = None
    if cache:
        watch = ClusterCache(core_client, cluster.namespaces, lws=core_client.has_lws()).start()
        assert watch.wait_synced(60), watch.describe()
        wakeup = Wakeup()
        watch.subscribe(wakeup.notify)
    core = K8sCore(
        core_client,
        clock=clock,
        namespaces=cluster.namespaces,
        ledger=ReservationRepository(store.engine),
        policy_namespace=cluster.layout.system,
        cache=watch,
    )
    spec = load_schedule(copy.deepcopy(schedule))
    store.apply_schedule(spec, now=start)
    store.set_gate(gate, now=start)
    # the engine's own cadence, with follow-ups of steps in flight every 10 s (production: 2 s)
    # so that a file stays within its time budget; decision "End-to-end tests on the cluster"
    config = replace(config or EngineConfig(), follow_up_s=follow_up_s)
    engine = Engine(store, core, clock, config, **hooks(store, core))
    return K8sWorld(
        clock, store, cluster, core, engine, spec, pool_spec, max_step_s=max_step_s, wakeup=wakeup
    )
