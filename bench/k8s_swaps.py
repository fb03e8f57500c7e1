"""The 1,000 × 2 storm of ``bench/k8s_storm.py`` on the control plane: one boundary, every swap.

Pair ``i`` is ``d{i}-a`` (running, one 1-GPU pod) and ``d{i}-b`` (stopped) on fake nodes of 8 GPUs
holding exactly as many GPUs as pairs, so every acquire needs the GPUs its release frees. One more
pair (``solo-a`` / ``solo-b``, 8 GPUs each, its own flavor and node) swaps alone at 21:30 on the
same fleet: the one-swap GPU idle figure. The storm is at 22:00.

The engine is the production one: ``K8sCore`` on its watch cache, the ``EngineLoop`` woken by
the cache's events (``Wakeup``), default ``EngineConfig`` apart from the page size. Its clock is
the wall clock shifted (``ShiftedClock``): it runs in real time and is moved once per phase, before
the loop starts, to the instant of the boundary; the fakes (kubelets, LWS) read the same clock.

What the API server accepted is seen by the bench's own watches (``Witness``: a second client,
the product's ``Informer`` over pods and Deployments), each event stamped on arrival
(``time.perf_counter``): a Deployment's ``spec.replicas`` turning 0 (a release accepted) or ≥ 1
(an acquire accepted), a pod's ``DELETED`` (its GPUs free).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gps_dagster.backends.k8s import ClusterCache, K8sCore, Kube, connect, names
from gps_dagster.backends.k8s.informer import Informer
from gps_dagster.backends.k8s.writes import WRITE_CONCURRENCY
from gps_dagster.clocks import WallClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.store import Store
from gps_dagster.testing.k8s.pools import ClusterPool

DAY = datetime(2026, 10, 20, tzinfo=UTC)
BEFORE = DAY + timedelta(hours=21)
SOLO_AT = DAY + timedelta(hours=21, minutes=30)
STORM_AT = DAY + timedelta(hours=22)
SOLO_FLAVOR = "A100-80GB"


class ShiftedClock(WallClock):
    """The wall clock plus an offset that ``jump`` sets (never backwards)."""

    def __init__(self, at: datetime) -> None:
        self.offset = at.timestamp() - time.time()
        super().__init__(lambda: time.time() + self.offset)

    def jump(self, at: datetime) -> None:
        self.offset = max(self.offset, at.timestamp() - time.time())

    def perf(self, at: datetime) -> float:
        """``at`` (of this clock) as a ``time.perf_counter`` reading."""
        return at.timestamp() - self.offset - time.time() + time.perf_counter()


def pool_doc(n: int, nodes: int) -> dict[str, Any]:
    deploys: list[dict[str, Any]] = [
        {"id": "solo-a", "gpus_per_replica": 8, "state": "running", "flavor": SOLO_FLAVOR},
        {"id": "solo-b", "gpus_per_replica": 8, "flavor": SOLO_FLAVOR},
    ]
    for i in range(n):
        deploys.append(
            {"id": f"d{i}-a", "gpus_per_replica": 1, "state": "running", "flavor": "H100-80GB"}
        )
        deploys.append({"id": f"d{i}-b", "gpus_per_replica": 1, "flavor": "H100-80GB"})
    node_docs = [{"name": f"swap-n{j:03d}", "gpus": 8} for j in range(nodes)]
    node_docs.append({"name": "swap-solo", "gpus": 8, "flavor": SOLO_FLAVOR})
    return {
        "name": "bench-swaps",
        "nodes": node_docs,
        "deploys": deploys,
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def schedule_doc(name: str, a: str, b: str, cron: str) -> dict[str, Any]:
    return {
        "name": name,
        "timezone": "UTC",
        "targets": [
            {"model_deploy_id": a, "default_state": "running"},
            {"model_deploy_id": b, "default_state": "stopped"},
        ],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": 10,
                "cron": cron,
                "duration": "6h",
                "states": [
                    {"model_deploy_id": a, "desired_state": "stopped"},
                    {"model_deploy_id": b, "desired_state": "running"},
                ],
            }
        ],
    }


@dataclass
class Witness:
    """The bench's own watches: when each deploy's scale write and each pod's deletion were seen."""

    kube: Kube
    namespaces: tuple[str, ...]
    scaled_down: dict[str, float] = field(default_factory=dict)
    scaled_up: dict[str, float] = field(default_factory=dict)
    pod_gone: dict[str, float] = field(default_factory=dict)
    """deploy id → when the last of its pods seen deleted was."""
    informers: list[Informer] = field(default_factory=list)

    def start(self) -> Witness:
        core, apps = self.kube.core, self.kube.apps
        self.informers = [
            Informer(
                self.kube,
                "pods",
                core.list_pod_for_all_namespaces,
                on_event=self._pod,
                label_selector=names.DEPLOY_ID,
            ),
            *(
                Informer(
                    self.kube,
                    "deployments",
                    apps.list_namespaced_deployment,
                    ns,
                    on_event=self._deploy,
                    label_selector=names.DEPLOY_ID,
                )
                for ns in self.namespaces
            ),
        ]
        for i in self.informers:
            i.start()
        for i in self.informers:
            if not i.wait_synced(120):
                raise TimeoutError(f"the bench's {i.kind} watch did not sync")
        return self

    def stop(self) -> None:
        for i in self.informers:
            i.stop()

    def reset(self) -> None:
        self.scaled_down.clear()
        self.scaled_up.clear()
        self.pod_gone.clear()

    def _pod(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            deploy = (obj.get("metadata") or {}).get("labels", {}).get(names.DEPLOY_ID)
            if deploy:
                self.pod_gone[deploy] = time.perf_counter()

    def _deploy(self, kind: str, obj: dict[str, Any]) -> None:
        if kind not in ("ADDED", "MODIFIED"):
            return
        deploy = (obj.get("metadata") or {}).get("labels", {}).get(names.DEPLOY_ID)
        replicas = int((obj.get("spec") or {}).get("replicas") or 0)
        seen = self.scaled_up if replicas >= 1 else self.scaled_down
        if deploy and deploy not in seen:
            seen[deploy] = time.perf_counter()


class Sent:
    """The engine client's requests by method and resource (the path's last collection)."""

    def __init__(self, kube: Kube) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        rest = kube.api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        parts = [x for x in url.split("?", 1)[0].split("/") if x]
        plural = {
            "pods",
            "nodes",
            "deployments",
            "services",
            "resourcequotas",
            "events",
            "namespaces",
            "configmaps",
            "horizontalpodautoscalers",
            "leaderworkersets",
        }
        kinds = [x for x in parts if x in plural]
        what = kinds[-1] if kinds else parts[-1]
        if kinds and parts[-1] != what:
            what += "/{name}"
        query = kwargs.get("query_params") or []
        if any(k == "watch" for k, _ in query):
            what += "?watch"
        with self._lock:
            key = f"{method} {what}"
            self.counts[key] = self.counts.get(key, 0) + 1
        return self._inner(method, url, *args, **kwargs)

    def take(self) -> dict[str, int]:
        with self._lock:
            out, self.counts = dict(self.counts), {}
        return out


@dataclass
class Phase:
    """One boundary's figures, in seconds of ``perf_counter`` since the loop started at it."""

    began: float
    releases: dict[str, float]
    acquires: dict[str, float]
    gone: dict[str, float]
    submitted: dict[str, float]
    """acquired deploy id → when the engine recorded its acquire submitted."""
    passes: int
    hastened: int
    sent: dict[str, int] = field(default_factory=dict)


def wait_for(what: str, done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not seen within {timeout_s:.0f} s")
        time.sleep(0.05)


def run_phase(
    engine: Engine,
    cache: ClusterCache,
    clock: ShiftedClock,
    witness: Witness,
    at: datetime,
    pairs: list[tuple[str, str]],
    sent: Sent,
    *,
    timeout_s: float,
) -> Phase:
    """Jump to ``at``, run the engine loop until every pair's acquire is accepted (and its pods
    Ready: the next phase starts from a quiet fleet), stop the loop."""
    witness.reset()
    sent.take()
    clock.jump(at)
    wakeup = Wakeup()
    cache.subscribe(wakeup.notify)
    loop = EngineLoop(engine, clock=clock, interval_s=30.0, wakeup=wakeup)
    began = time.perf_counter()
    target: Callable[[], object] = loop.run
    profile = None
    if os.environ.get("GPS_BENCH_PROFILE") and len(pairs) > 1:  # a debugging aid
        import cProfile

        profile = cProfile.Profile()
        target = lambda: profile.runcall(loop.run)  # noqa: E731
    runner = threading.Thread(target=target, name="bench-engine-loop", daemon=True)
    runner.start()
    try:
        wait_for("every acquire", lambda: all(b in witness.scaled_up for _, b in pairs), timeout_s)
    except TimeoutError:
        print(
            f"    passes {loop.passes} failures {loop.failures} now {clock.now()} next due "
            f"{engine.next_due(clock.now())} actions {len(engine.store.list_actions())}"
        )
        for a in engine.store.list_actions()[-6:]:
            print(f"    step {a.deploy_id} {a.order} {a.step} {a.state} {a.detail}", flush=True)
        raise
    finally:
        loop.stop()
        runner.join(timeout=120)
        if profile is not None:
            import pstats

            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    submitted = {}
    wanted = {b for _, b in pairs}
    for a in engine.store.list_actions(states=("accepted", "converged")):
        if a.order == "acquire" and a.deploy_id in wanted and a.submitted_at is not None:
            submitted[a.deploy_id] = clock.perf(a.submitted_at) - began
    rel = {a: witness.scaled_down[a] - began for a, _ in pairs if a in witness.scaled_down}
    acq = {b: witness.scaled_up[b] - began for _, b in pairs}
    gone = {a: witness.pod_gone[a] - began for a, _ in pairs if a in witness.pod_gone}
    return Phase(began, rel, acq, gone, submitted, loop.passes, loop.hastened, sent.take())


def plain_scale_writes(kubeconfig: str, targets: list[tuple[str, str]], replicas: int) -> float:
    """The baseline: the same scale writes (a merge patch of ``spec.replicas``) from a plain
    client, ``WRITE_CONCURRENCY`` at a time (the adapter's ``submit_many`` width)."""
    kube = Kube(connect(kubeconfig, None))
    body = {"spec": {"replicas": replicas}}

    def one(t: tuple[str, str]) -> None:
        kube.call(
            kube.apps.patch_namespaced_deployment, t[1], t[0], body, what="scale", mutating=True
        )

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=WRITE_CONCURRENCY) as pool:
        list(pool.map(one, targets))
    return time.perf_counter() - start


def storm(kubeconfig: str, admin: Kube, tmp: Path, n: int, nodes: int) -> list[str]:
    clock = ShiftedClock(BEFORE)
    began = time.perf_counter()
    spec = load_pool(pool_doc(n, nodes))
    cluster = ClusterPool(admin, clock, spec, prefix="swap").create(settle_timeout_s=None)
    driver = cluster.drive()
    try:
        wait_for(
            "every running deploy's pod Ready", lambda: ready_pods(admin, cluster) >= n + 1, 1200
        )
    except BaseException:
        driver.stop()
        cluster.close()
        raise
    print(
        f"  storm pool: {nodes} + 1 nodes x 8 GPUs, {2 * n + 2} Deployments ({n + 1} running) "
        f"laid out in {time.perf_counter() - began:.0f} s",
        flush=True,
    )
    witness = Witness(Kube(connect(kubeconfig, None)), cluster.namespaces).start()
    api = Kube(connect(kubeconfig, None))
    sent = Sent(api)
    cache = ClusterCache(api, cluster.namespaces, lws=api.has_lws()).start()
    try:
        if not cache.wait_synced(120):
            raise TimeoutError(f"the engine's cache did not sync: {cache.describe()}")
        core = K8sCore(api, clock=clock, namespaces=cluster.namespaces, cache=cache)
        store = Store.open(f"sqlite:///{tmp / 'swaps.sqlite'}")
        started = time.perf_counter()
        store.apply_schedule(
            load_schedule(schedule_doc("solo", "solo-a", "solo-b", "30 21 * * *")), now=clock.now()
        )
        for i in range(n):
            doc = schedule_doc(f"s{i:04d}", f"d{i}-a", f"d{i}-b", "0 22 * * *")
            store.apply_schedule(load_schedule(doc), now=clock.now())
        store.set_gate("enforce", now=clock.now())
        engine = Engine(store, core, clock, EngineConfig(page_size=1000))
        engine.run_pass()  # the first plan of every schedule: nothing to do before 21:30
        print(
            f"  {n + 1} schedules applied and planned once in "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
        solo = run_phase(
            engine, cache, clock, witness, SOLO_AT, [("solo-a", "solo-b")], sent, timeout_s=120
        )
        pairs = [(f"d{i}-a", f"d{i}-b") for i in range(n)]
        wait_for("solo-b Ready", lambda: ready_pods(admin, cluster) >= n + 1, 120)
        big = run_phase(engine, cache, clock, witness, STORM_AT, pairs, sent, timeout_s=900)
        wait_for("every acquired pod Ready", lambda: ready_pods(admin, cluster) >= n + 1, 600)
        targets = [(cluster.workloads[b][1], cluster.workloads[b][2]) for _, b in pairs]
        baseline = plain_scale_writes(kubeconfig, targets, 0)
        errors = list(driver.errors)
        store.engine.dispose()
    finally:
        driver.stop()
        cache.stop()
        witness.stop()
        cluster.close()
    return rows(n, nodes, solo, big, baseline, errors)


def ready_pods(admin: Kube, cluster: ClusterPool) -> int:
    """Pods of the pool's deploys the fake kubelet reports Ready."""
    count = 0
    for ns in cluster.namespaces:
        for p in admin.items(
            admin.core.list_namespaced_pod, ns, what="pods", label_selector=names.DEPLOY_ID
        ):
            conditions = (p.get("status") or {}).get("conditions") or []
            count += any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return count


def rows(
    n: int, nodes: int, solo: Phase, big: Phase, baseline: float, errors: list[str]
) -> list[str]:
    release = max(big.releases.values()) if len(big.releases) == n else float("nan")
    last_gone = max(big.gone.values()) if big.gone else float("nan")
    last_acquire = max(big.acquires.values())
    idle_seen = solo.acquires["solo-b"] - solo.gone.get("solo-a", float("nan"))
    idle_sub = solo.submitted.get("solo-b", float("nan")) - solo.gone.get("solo-a", float("nan"))
    per_swap = [
        big.acquires[f"d{i}-b"] - big.gone[f"d{i}-a"] for i in range(n) if f"d{i}-a" in big.gone
    ]
    out = [
        f"{n:,} schedules x 2 Deployments on {nodes} fake nodes x 8 GPUs, one boundary -> every "
        f"release accepted by the API server: {release:.1f} s (goal <= 10 s and <= 2x baseline); "
        f"baseline: the same {n:,} scale writes from a plain client, {WRITE_CONCURRENCY} at a "
        f"time, {baseline:.1f} s: {release / baseline:.1f}x",
        f"  -> every acquire accepted {last_acquire - last_gone:.1f} s after the last release "
        f"pod deleted (goal <= 5 s); boundary -> last pod deleted {last_gone:.1f} s, -> last "
        f"acquire accepted {last_acquire:.1f} s; {big.passes} passes ({big.hastened} woken by "
        f"watch events)",
        f"  per swap of the storm, last pod gone -> acquire accepted: median "
        f"{statistics.median(per_swap):.2f} s, max {max(per_swap):.2f} s",
        f"GPU idle, one swap (8 GPUs, same fleet): its release's last pod gone -> the acquire "
        f"submitted {idle_sub:.2f} s, accepted {idle_seen:.2f} s (goal <= 1 s); boundary -> "
        f"release accepted {solo.releases.get('solo-a', float('nan')):.2f} s, pod gone "
        f"{solo.gone.get('solo-a', float('nan')):.2f} s; {solo.passes} passes",
    ]
    top = sorted(big.sent.items(), key=lambda kv: -kv[1])[:8]
    out.append(
        f"  the engine's requests during the storm ({sum(big.sent.values())}): "
        + ", ".join(f"{k} {v}" for k, v in top)
    )
    if errors:
        out.append(f"  (fake cluster errors during the run: {len(errors)}, last: {errors[-1]})")
    return out
