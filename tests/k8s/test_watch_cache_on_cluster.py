"""The adapter's watch cache on the real control plane (fake nodes): reads without LISTs, a pod
deletion seen from the watch, a 410 relist, the broken-watch fallback, and the engine loop woken
by a watch event before its follow-up.

Requests are counted at the adapter's own transport (as ``test_reads_never_write.Writes``): a
LIST is a GET without ``watch=true`` on a collection path; a watch is a GET with it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml

from gps_dagster.backends.k8s import ClusterCache, K8sCore, Kube, connect, names, pods
from gps_dagster.backends.k8s.informer import Gone, InformerLimits
from gps_dagster.engine.config import EngineConfig
from gps_dagster.store.reservations import ReservationRepository
from gps_dagster.testing.k8s.controlplane import SecondApiServer
from tests.engine.harness import A, a_running_pool, local, seed_schedule
from tests.k8s.test_adapter_on_cluster import Pool, two_deploys

WALL_S = 60.0
"""Wall-clock bound of every wait here (polling the cache, never deciding an outcome)."""


class Requests:
    """Every request a client sends, by kind (a proxy at its transport); ``broken`` refuses
    every watch (the connection drops, as when the API server is unreachable)."""

    def __init__(self, api: Kube) -> None:
        self.seen: list[tuple[str, str]] = []
        self.broken = False
        self._lock = threading.Lock()
        rest = api.api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        watching = watch_query(args, kwargs)
        with self._lock:
            self.seen.append((method.upper(), url + ("?watch=true" if watching else "")))
        if self.broken and watching:
            raise urllib3.exceptions.ProtocolError("connection refused (test)")
        return self._inner(method, url, *args, **kwargs)

    def since(self, mark: int) -> list[tuple[str, str]]:
        with self._lock:
            return self.seen[mark:]

    def mark(self) -> int:
        with self._lock:
            return len(self.seen)


def watch_query(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a request of the generated client is a WATCH: its query parameters are handed to
    ``RESTClientObject.request`` apart from the URL (``query_params``, the first positional)."""
    query = kwargs.get("query_params", args[0] if args else None) or []
    return any(k == "watch" and str(v).lower() == "true" for k, v in query)


def lists(seen: list[tuple[str, str]]) -> list[str]:
    """LIST requests: GETs of a collection, not watches (a GET of one object ends in its name;
    the discovery GET of an API group is neither)."""
    out = []
    for method, url in seen:
        path = url.split("?", 1)[0]
        if method != "GET" or "watch=true" in url.lower():
            continue
        last = path.rstrip("/").rsplit("/", 1)[-1]
        if last in {
            "pods",
            "nodes",
            "deployments",
            "services",
            "horizontalpodautoscalers",
            "leaderworkersets",
            "resourcequotas",
            "events",
            "replicasets",
            "statefulsets",
            "daemonsets",
            "jobs",
            "configmaps",
        }:
            out.append(url)
    return out


def until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WALL_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WALL_S} s")
        time.sleep(0.05)


class Cached:
    """A contract pool whose core reads from a started, synced watch cache."""

    def __init__(self, pool: Pool, limits: InformerLimits | None = None) -> None:
        self.pool = pool
        self.requests = Requests(pool.api)
        self.cache = ClusterCache(
            pool.api, pool.cluster.namespaces, lws=pool.api.has_lws(), limits=limits
        ).start()
        assert self.cache.wait_synced(WALL_S), self.cache.describe()
        self.core = K8sCore(
            pool.api,
            clock=pool.clock,
            namespaces=pool.cluster.namespaces,
            ledger=ReservationRepository(pool.engine),
            policy_namespace=pool.cluster.layout.system,
            cache=self.cache,
        )

    def a_pass(self) -> None:
        """The reads of a steady engine pass and of the operator's views."""
        self.core.get_deploys(["b", "c"])
        self.core.preview_capacity("c", delta_replicas=1)
        self.core.inventory()

    def pods_of(self, deploy: str) -> list[dict[str, Any]]:
        _, ns, _ = self.pool.workload(deploy)
        return [
            p for p in self.cache.pods(ns) or [] if pods.labels(p).get(names.DEPLOY_ID) == deploy
        ]


@pytest.fixture
def cached(k8s_cluster: str, sqlite_url: str) -> Iterator[Cached]:
    pool = Pool(two_deploys(), sqlite_url)
    c = Cached(
        pool,
        InformerLimits(
            broken_limit_s=30.0,
            backoff_s=0.05,
            backoff_max_s=0.2,
            watch_timeout_s=30,
            monotonic=Clock.now,
        ),
    )
    try:
        yield c
    finally:
        c.core.close()
        pool.close()


class Clock:
    """The informers' monotonic clock, moved by the test only."""

    at = 1000.0

    @staticmethod
    def now() -> float:
        return Clock.at


def test_after_warm_up_a_steady_pass_sends_no_list_and_reads_what_a_list_reads(
    cached: Cached,
) -> None:
    """Mutations caught: any pass read left on ``kube.items`` (its LIST is counted), or a cached
    read that differs from the direct one (the views compared with the cache off)."""
    c = cached
    c.a_pass()  # warm-up (the LWS discovery, the policy)
    mark = c.requests.mark()
    c.a_pass()
    seen = c.requests.since(mark)
    assert lists(seen) == [], lists(seen)
    direct = K8sCore(
        c.pool.api,
        clock=c.pool.clock,
        namespaces=c.pool.cluster.namespaces,
        ledger=ReservationRepository(c.pool.engine),
        policy_namespace=c.pool.cluster.layout.system,
    )
    mark = c.requests.mark()
    direct.get_deploys(["b", "c"])
    direct.preview_capacity("c", delta_replicas=1)
    direct.inventory()
    baseline = lists(c.requests.since(mark))
    assert len(baseline) >= 8, baseline  # the counter counts: the same reads without the cache
    print(
        f"requests of the pass's reads: cache {len(seen)} ({len(lists(seen))} LIST), direct "
        f"{len(c.requests.since(mark))} ({len(baseline)} LIST)"
    )

    def same() -> bool:  # controllers may still write statuses: equal once the watch caught up
        return (
            c.core.get_deploys(["b", "c"]) == direct.get_deploys(["b", "c"])
            and c.core.preview_capacity("c", delta_replicas=1)
            == direct.preview_capacity("c", delta_replicas=1)
            and c.core.inventory() == direct.inventory()
        )

    until(same, "the cached reads equal to the direct ones")
    state = c.core.cache_state()
    assert state["mode"] == "watch" and state["kinds"]["pods"]["synced"]


def test_a_pod_deletion_is_seen_from_the_watch_without_a_list(cached: Cached) -> None:
    """Mutation caught: an informer that does not apply DELETED keeps the pod forever."""
    c = cached
    (victim,) = c.pods_of("b")
    _, ns, _ = c.pool.workload("b")
    woke: list[frozenset[str]] = []
    c.cache.subscribe(woke.append)
    mark = c.requests.mark()
    c.pool.admin.call(
        c.pool.admin.core.delete_namespaced_pod,
        pods.name(victim),
        ns,
        grace_period_seconds=0,
        what="delete b's pod",
        mutating=True,
    )
    until(
        lambda: pods.name(victim) not in {pods.name(p) for p in c.pods_of("b")},
        "the deletion seen by the cache",
    )
    assert lists(c.requests.since(mark)) == []
    assert any("b" in ids for ids in woke), woke  # the wake-up names the deploy


@pytest.fixture
def on_twin(k8s_cluster: str, sqlite_url: str, tmp_path: Path) -> Iterator[Cached]:
    """A contract pool whose core and cache talk to a second API server started now: its watch
    cache begins at the current version, so a watch from an older one is 410 Gone (the first
    server's cache began when the cluster was empty and still holds everything since)."""
    twin = SecondApiServer(Path(k8s_cluster))
    twin.start()
    try:  # a setup that fails after the start must not leave the twin API server running
        config = yaml.safe_load(Path(k8s_cluster).read_text())
        config["clusters"][0]["cluster"]["server"] = twin.server
        path = tmp_path / "twin.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        pool = Pool(two_deploys(), sqlite_url)
        try:
            pool.api = Kube(connect(str(path), None))
            c = Cached(
                pool,
                InformerLimits(
                    broken_limit_s=30.0,
                    backoff_s=0.05,
                    backoff_max_s=0.2,
                    watch_timeout_s=30,
                    monotonic=Clock.now,
                ),
            )
            try:
                yield c
            finally:
                c.core.close()
        finally:
            pool.close()
    finally:
        twin.kill()


def test_a_watch_from_a_too_old_version_is_gone_and_the_cache_relists_and_stays_right(
    on_twin: Cached,
) -> None:
    """The API server answers a watch from a version older than its watch cache with 410 Gone
    ("too old resource version"); the running informer, its watch down while a pod is deleted
    and then reopened from such a version, LISTs again and its collection is the cluster's.
    Mutation caught: treating 410 as a broken watch reopens the too-old version forever (the
    relist never comes and the deleted pod stays)."""
    c = on_twin
    (inf,) = c.cache.informers["pods"]
    probe = type(inf)(c.pool.api, "pods", c.pool.api.core.list_pod_for_all_namespaces)
    probe.relist()
    probe.store.resource_version = "1"
    with pytest.raises(Gone):
        probe.watch_once()
    (victim,) = c.pods_of("b")
    _, ns, _ = c.pool.workload("b")
    before = inf.state.relists
    c.requests.broken = True  # the watch down while the pod goes: only a relist can see it
    resp = inf._resp
    assert resp is not None
    resp.shutdown()
    until(lambda: inf.state.broken_since is not None, "the pod watch broken")
    with inf._lock:
        inf.store.resource_version = "1"
    c.pool.admin.call(
        c.pool.admin.core.delete_namespaced_pod,
        pods.name(victim),
        ns,
        grace_period_seconds=0,
        what="delete b's pod",
        mutating=True,
    )
    c.requests.broken = False  # reopened from version 1: 410
    until(lambda: inf.state.relists > before, "a relist after 410")
    until(
        lambda: pods.name(victim) not in {pods.name(p) for p in c.pods_of("b")},
        "the relisted cache without the deleted pod",
    )
    assert c.cache.describe()["kinds"]["pods"]["mode"] == "watch"


def test_a_watch_broken_beyond_the_limit_sends_reads_to_the_api_server_until_it_heals(
    cached: Cached,
) -> None:
    """Watches refused: within the limit (the injected monotonic clock) reads still come from
    the cache; beyond it they are LISTs and ``describe`` says ``direct``; healed, the cache
    serves again. Mutation caught: ``usable`` ignoring ``broken_since``."""
    c = cached
    c.a_pass()
    (inf,) = c.cache.informers["pods"]
    c.requests.broken = True
    resp = inf._resp
    if resp is not None:
        resp.shutdown()
    until(lambda: inf.state.broken_since is not None, "the pod watch broken")
    mark = c.requests.mark()
    c.a_pass()
    assert lists(c.requests.since(mark)) == []  # broken, but within the limit
    Clock.at += 31.0
    mark = c.requests.mark()
    c.a_pass()
    direct = lists(c.requests.since(mark))
    assert any("/pods" in u for u in direct), direct
    state = c.core.cache_state()
    assert state["kinds"]["pods"]["mode"] == "direct" and state["kinds"]["pods"]["fallbacks"] > 0
    assert c.core.describe("b")["cache"]["mode"] == "direct"
    c.requests.broken = False
    until(lambda: inf.state.broken_since is None, "the watch reopened")
    mark = c.requests.mark()
    c.a_pass()
    assert not any("/pods" in u for u in lists(c.requests.since(mark)))


def stop_state(w: Any, deploy: str) -> str | None:
    found = [s.state for s in w.store.list_actions(deploy_id=deploy) if s.step == "stop"]
    return found[-1] if found else None


def test_the_engine_is_woken_by_the_pod_deletion_before_its_follow_up(new_world: Any) -> None:
    """A's stop is accepted at 18:00 with 30 s of grace; the follow-up is 120 s later. When the
    fake kubelet deletes A's pods (18:00:30) the clock stops there: only a wake-up from the watch
    can run the pass that sees A's stop converged before the follow-up — the wall clock
    only bounds the wait. Mutation caught: a loop that ignores the wake-up (or a cache that
    does not notify) leaves the stop accepted until 18:02 and the wait fails."""
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=local("2026-10-19T17:59:30"),
        follow_up_s=120.0,
        cache=True,
        config=EngineConfig(pass_interval_s=600.0),
    )
    w.wait_for(
        lambda: stop_state(w, A) == "accepted", "A's stop accepted", by=local("2026-10-19T18:01")
    )
    accepted_at = w.clock.now()
    _, ns, _ = w.cluster.workloads[A]

    def a_pods() -> list[dict[str, Any]]:
        return w.cluster.kube.items(
            w.cluster.kube.core.list_namespaced_pod,
            ns,
            label_selector=f"{names.DEPLOY_ID}={A}",
            what="A pods",
        )

    gone_at = w.wait_for(
        lambda: not a_pods(), "A's pods gone", by=accepted_at + timedelta(seconds=100)
    )
    w.until_quiet_wall(lambda: stop_state(w, A) == "converged", "A's stop converged, clock stopped")
    assert w.clock.now() == gone_at < accepted_at + timedelta(seconds=120)
    assert w.loop.hastened >= 1


def test_the_clock_never_jumps_while_a_watch_event_has_the_loop_awake(new_world: Any) -> None:
    """The test world moves the clock only while the loop sleeps: a loop a watch event woke
    (its wake-up instant is None while it hastens and passes) must pass before the clock moves,
    or a ``drive`` computes its step without the loop's wake-up and jumps straight to its end,
    past every boundary in between (seen under load: the seed week lost Thu 18:00 and Fri 08:00).
    Mutation caught: moving the clock without re-checking, under the sleeper's condition, that
    the loop still sleeps towards an instant ahead."""
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=local("2026-10-19T17:59:30"),
        cache=True,
        config=EngineConfig(pass_interval_s=600.0),
    )
    w.tick(1)
    before = w.clock.now()
    with w._cond:  # as the loop's sleeper leaves it when a watch event wakes it
        w._wake_at = None
    w._step_towards(before + timedelta(days=7))
    assert w.clock.now() == before
