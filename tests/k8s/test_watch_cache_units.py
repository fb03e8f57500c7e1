"""The watch cache's pure parts, without a cluster: the object store and its indices, event
application in stream order, pagination, 410 → relist, the broken-watch fallback on an injected
clock, the finder's client-side label queries, and the engine loop's wake-up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.cache import POD_INDEXERS, WORKLOAD_INDEXERS, ClusterCache
from gps_dagster.backends.k8s.informer import Gone, Informer, InformerLimits, ObjectStore
from gps_dagster.backends.k8s.workloads import query_matches
from gps_dagster.clocks import VirtualClock
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.ports import Transient
from tests.k8s.cluster import T0_K8S


def pod(
    name: str, rv: str, *, ns: str = "a", node: str = "", deploy: str | None = None
) -> dict[str, Any]:
    labels = {names.DEPLOY_ID: deploy} if deploy else {}
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels},
        "spec": {"nodeName": node} if node else {},
    }


def test_events_keep_the_indices_of_each_object_where_it_is_now() -> None:
    """A pod moving node, changing deploy or deleted leaves no key behind in the old index value
    (mutation caught: ``apply`` forgetting ``_drop`` of the old state keeps the pod on n1)."""
    s = ObjectStore(POD_INDEXERS)
    s.replace([pod("p", "1", node="n1", deploy="x"), pod("q", "2", ns="b", node="n1")], "2")
    assert [p["metadata"]["name"] for p in s.by_index("node", "n1")] == ["p", "q"]
    s.apply("MODIFIED", pod("p", "3", node="n2", deploy="y"))
    assert [p["metadata"]["name"] for p in s.by_index("node", "n1")] == ["q"]
    assert s.by_index("deploy", "x") == [] and len(s.by_index("deploy", "y")) == 1
    assert s.apply("DELETED", pod("q", "4", ns="b", node="n1")) is not None
    assert s.by_index("node", "n1") == [] and "n1" not in s.indices["node"]
    assert s.by_index("namespace", "b") == []
    assert s.resource_version == "4"


def test_events_apply_in_stream_order_and_a_replay_or_bookmark_changes_nothing() -> None:
    """Resource versions are opaque (equality only): the stream's order decides, a replay of the
    stored version is a no-op, a bookmark only moves the version, a DELETED of an unknown object
    is nothing (mutation caught: a numeric comparison would drop rv "10" after "9")."""
    s = ObjectStore(POD_INDEXERS)
    s.replace([], "8")
    assert s.apply("ADDED", pod("p", "9", node="n1")) is not None
    assert s.apply("MODIFIED", pod("p", "10", node="n2")) is not None
    assert s.objects[("a", "p")]["spec"]["nodeName"] == "n2"
    assert s.apply("MODIFIED", pod("p", "10", node="n2")) is None  # a replay
    assert s.apply("BOOKMARK", {"metadata": {"resourceVersion": "42"}}) is None
    assert s.resource_version == "42" and len(s.objects) == 1
    assert s.apply("DELETED", pod("ghost", "43")) is None
    s.replace([pod("r", "50")], "50")  # a relist replaces the collection wholesale
    assert list(s.objects) == [("a", "r")] and s.by_index("node", "n2") == []


class FakeResponse:
    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.body = "".join(json.dumps(e) + "\n" for e in lines).encode()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeKube:
    """Pages of a LIST (``limit`` / ``continue``) and scripted watch answers."""

    def __init__(self, pages: list[dict[str, Any]], watches: list[Any]) -> None:
        self.pages, self.watches = pages, watches
        self.lists: list[dict[str, Any]] = []
        self.watched: list[dict[str, Any]] = []

    def call(self, fn: Any, *args: Any, what: str, **kw: Any) -> dict[str, Any]:
        self.lists.append(kw)
        return self.pages[len(self.lists) - 1]

    def stream(self, fn: Any, *args: Any, what: str, **kw: Any) -> Any:
        self.watched.append(kw)
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return FakeResponse(answer)


def page(items: list[dict[str, Any]], rv: str, token: str | None = None) -> dict[str, Any]:
    return {"items": items, "metadata": {"resourceVersion": rv, "continue": token}}


def informer(kube: FakeKube, **limits: Any) -> Informer:
    return Informer(
        kube,
        "pods",
        lambda **_: None,
        indexers=POD_INDEXERS,  # type: ignore[arg-type]
        limits=InformerLimits(page_size=2, **limits),
    )


def test_a_list_is_paginated_and_the_watch_starts_from_its_version_with_bookmarks() -> None:
    """Mutations caught: no ``limit`` / ``_continue`` (one page only), the watch started from the
    last page's version or without ``allow_watch_bookmarks``."""
    kube = FakeKube(
        [page([pod("p", "5"), pod("q", "6")], "7", "tok"), page([pod("r", "7")], "", None)],
        [
            [
                {"type": "DELETED", "object": pod("q", "8")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
            ]
        ],
    )
    inf = informer(kube)
    inf.relist()
    assert [kw.get("_continue") for kw in kube.lists] == [None, "tok"]
    assert all(kw["limit"] == 2 for kw in kube.lists)
    assert sorted(k[1] for k in inf.store.objects) == ["p", "q", "r"]
    inf.watch_once()
    assert kube.watched[0]["resource_version"] == "7"
    assert kube.watched[0]["allow_watch_bookmarks"] is True and kube.watched[0]["watch"] is True
    assert sorted(k[1] for k in inf.store.objects) == ["p", "r"]
    assert inf.store.resource_version == "9"


def test_a_410_error_event_is_gone_and_the_next_round_relists() -> None:
    """The watch's ERROR event with code 410 raises ``Gone``; the run loop then LISTs again
    (mutation caught: treating it as a broken watch reopens the same too-old version forever)."""
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    inf = informer(FakeKube([page([pod("p", "5")], "5")], [[gone]]))
    inf.relist()
    with pytest.raises(Gone):
        inf.watch_once()
    stops = iter([False, False, False, True])
    kube = FakeKube([page([], "5"), page([pod("n", "20")], "20")], [[gone], []])
    inf = informer(kube)
    inf._stop.is_set = lambda: next(stops)  # type: ignore[method-assign]
    inf._run()
    assert len(kube.lists) == 2 and inf.state.relists == 2
    assert list(inf.store.objects) == [("a", "n")]
    assert [w["resource_version"] for w in kube.watched] == ["5", "20"]


def test_a_watch_broken_beyond_the_limit_makes_reads_direct_and_a_reopen_heals_it() -> None:
    """On an injected monotonic clock: broken for the limit exactly is still usable, a moment
    more is not; a watch reopened clears it (mutation caught: ``usable`` ignoring broken_since)."""
    now = [100.0]
    kube = FakeKube([page([pod("p", "5")], "5")], [[]])
    inf = informer(kube, broken_limit_s=60.0, monotonic=lambda: now[0])
    inf.relist()
    inf._broken(Transient("refused", reason="api_unreachable"))
    now[0] += 60.0
    assert inf.usable()
    now[0] += 0.5
    assert not inf.usable() and inf.age_s() == 60.5
    inf.watch_once()  # reopened: fresh again
    assert inf.usable() and inf.age_s() == 0.0


def test_a_collection_older_than_its_max_age_is_not_trusted_even_without_an_error() -> None:
    """A connection that died silently raises nothing until its read times out: the age alone
    sends reads direct past ``max_age_s`` (mutation caught: ``usable`` ignoring the age)."""
    now = [0.0]
    inf = informer(
        FakeKube([page([pod("p", "5")], "5")], []), max_age_s=120.0, monotonic=lambda: now[0]
    )
    inf.relist()
    now[0] = 120.0
    assert inf.usable()
    now[0] = 120.5
    assert not inf.usable() and inf.state.broken_since is None


def test_the_cache_answers_none_for_a_kind_not_usable_and_counts_the_fallback() -> None:
    """``None`` is "read directly" (mutation caught: an unsynced informer answering [] — an
    empty cluster — would let preview_capacity see free GPUs that are not)."""
    kube = FakeKube([], [])
    cache = ClusterCache.__new__(ClusterCache)
    cache.kube, cache.namespaces, cache.limits = kube, (), InformerLimits()  # type: ignore[assignment]
    cache.fallbacks, cache._subscribers = {}, []
    import threading

    cache._lock = threading.Lock()
    inf = informer(FakeKube([page([pod("p", "5", node="n1")], "5")], []))
    cache.informers = {"pods": [inf]}
    assert cache.pods() is None and cache.fallbacks == {"pods": 1}
    assert cache.describe()["kinds"]["pods"]["mode"] == "direct"
    inf.relist()
    assert [p["metadata"]["name"] for p in cache.pods("a") or []] == ["p"]
    assert cache.describe()["mode"] == "watch"
    assert 'gps_k8s_cache_direct{kind="pods"} 0.0' in cache.metrics_text()


@pytest.mark.parametrize(
    ("query", "labels", "expected"),
    [
        (names.DEPLOY_ID, {names.DEPLOY_ID: "a"}, True),
        (names.DEPLOY_ID, {}, False),
        (f"{names.DEPLOY_ID}=a", {names.DEPLOY_ID: "a"}, True),
        (f"{names.DEPLOY_ID}=a", {names.DEPLOY_ID: "ab"}, False),
        (f"{names.DEPLOY_ID} in (a,b,c)", {names.DEPLOY_ID: "b"}, True),
        (f"{names.DEPLOY_ID} in (a,b,c)", {names.DEPLOY_ID: "d"}, False),
        (f"{names.DEPLOY_ID} in (a,b),{names.ENDPOINT}=e", {names.DEPLOY_ID: "a"}, False),
    ],
)
def test_the_finder_queries_match_cached_labels_as_the_api_server_would(
    query: str, labels: dict[str, str], expected: bool
) -> None:
    assert query_matches(query, labels) is expected


class FakeEngine:
    def __init__(self, clock: VirtualClock, waiting: set[str]) -> None:
        self.clock, self.waiting = clock, waiting
        self.hastened: list[list[str]] = []
        self.passes: list[Any] = []

    def next_due(self, now: Any) -> Any:
        return now + timedelta(seconds=2)  # a follow-up 2 s later

    def hasten(self, ids: list[str]) -> list[str]:
        self.hastened.append(ids)
        return ["s"] if set(ids) & self.waiting else []


def test_a_wakeup_for_a_waited_on_deploy_ends_the_sleep_at_the_same_virtual_instant() -> None:
    """The sleeper is woken by ``notify`` (no wall time decides it: the virtual clock only moves
    when the sleeper times out). An event of a deploy nothing waits on sends it back to sleep;
    one of a waited-on deploy returns with the clock unmoved (mutation caught: ignoring the
    wake-up returns only after the 2 s follow-up, the clock moved)."""
    clock = VirtualClock(T0_K8S)
    engine = FakeEngine(clock, waiting={"b"})
    wakeup = Wakeup()
    script = iter([["other"], ["b"]])

    def sleeper(seconds: float) -> None:
        ids = next(script, None)
        if ids is None:
            clock.advance(timedelta(seconds=seconds))
        else:
            wakeup.notify(ids)

    loop = EngineLoop(engine, clock=clock, sleeper=sleeper, wakeup=wakeup)  # type: ignore[arg-type]
    loop.sleep_until_due()
    assert engine.hastened == [["other"], ["b"]]
    assert clock.now() == T0_K8S and loop.hastened == 1
    loop.sleep_until_due()  # nothing notified: the whole follow-up wait
    assert clock.now() == T0_K8S + timedelta(seconds=2)


def test_stop_ends_a_production_wait_on_the_wakeup() -> None:
    wakeup = Wakeup()
    loop = EngineLoop(
        FakeEngine(VirtualClock(T0_K8S), set()),
        clock=VirtualClock(T0_K8S),  # type: ignore[arg-type]
        wakeup=wakeup,
    )
    loop.stop()
    assert wakeup.wait(30.0) is True  # returns at once, closed


def test_hasten_makes_due_now_only_the_schedules_whose_steps_wait_on_the_deploys(
    sqlite_url: str,
) -> None:
    """On the simulator at 18:00: A's stop is accepted (in flight), its follow-up due later.
    ``Engine.hasten`` for A makes the schedule due now; for a deploy with nothing in flight it
    does nothing (mutation caught: hastening without the in-flight join wakes every schedule)."""
    from tests.engine.harness import A, a_running_pool, local, make_world

    w = make_world(
        sqlite_url,
        pool=a_running_pool(),
        start=local("2026-10-19T18:00"),
        config=EngineConfig(follow_up_s=120.0),
    )
    w.engine.run_pass()
    assert any(a.state == "accepted" for a in w.store.list_actions(deploy_id=A))
    name = w.spec.name
    later = w.store.due_at(name)
    assert later is not None and later > w.clock.now()
    assert w.engine.hasten(["nobody"]) == []
    assert w.store.due_at(name) == later
    assert w.engine.hasten([A]) == [name]
    assert w.store.due_at(name) == w.clock.now()
    assert w.engine.hasten([A]) == []  # due already: nothing moves


def test_engine_run_wires_the_wakeup_and_the_cache_gauges_only_for_a_core_that_offers_them() -> (
    None
):
    """Mutation caught: ``engine run`` never subscribing (no wake-up) or dropping the gauges."""
    import types

    from gps_dagster.cli.engine_run_cmd import _core_metrics, _wakeup

    got: list[Any] = []
    watching = types.SimpleNamespace(
        subscribe=lambda cb: got.append(cb) or True, metrics_text=lambda: "gps_k8s_cache_x 1\n"
    )
    rt: Any = types.SimpleNamespace(core=watching)
    wakeup = _wakeup(rt)
    assert isinstance(wakeup, Wakeup) and got == [wakeup.notify]
    assert _core_metrics(rt) == "gps_k8s_cache_x 1\n"
    plain: Any = types.SimpleNamespace(core=object())
    assert _wakeup(plain) is None and _core_metrics(plain) == ""
    unwatched: Any = types.SimpleNamespace(core=types.SimpleNamespace(subscribe=lambda cb: False))
    assert _wakeup(unwatched) is None


class IndexedOnly:
    """A workload source that answers by deploy id only: a scan of every workload fails."""

    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objs, self.asked = objs, []  # type: ignore[var-annotated]

    def workloads(self, kind: str) -> list[dict[str, Any]] | None:
        raise AssertionError("a lookup by deploy id scanned every cached workload")

    def workloads_of(self, kind: str, deploy_ids: Any) -> list[dict[str, Any]] | None:
        ids = list(deploy_ids)
        self.asked.append(ids)
        return [o for o in self.objs if o["metadata"]["labels"][names.DEPLOY_ID] in ids]


def test_the_finder_looks_deploy_ids_up_in_the_cache_index_and_still_matches_the_query() -> None:
    """A storm's writes each find their workload (and ``find_many`` a batch's): by the cache's
    deploy-id index, not a label match of every cached workload (2,000 at the 1,000 storm)."""
    from gps_dagster.backends.k8s.workloads import Finder

    def deployment(deploy: str) -> dict[str, Any]:
        meta = {"name": deploy, "namespace": "a", "labels": {names.DEPLOY_ID: deploy}}
        return {"metadata": meta, "spec": {"replicas": 1, "template": {}}}

    source = IndexedOnly([deployment("x"), deployment("y"), deployment("z")])
    finder = Finder(None, ("a",), lws=False, source=source)  # type: ignore[arg-type]
    assert finder.find("y").name == "y"
    assert sorted(finder.find_many(["z", "x"])) == ["x", "z"]
    assert source.asked == [["y"], ["x", "z"]]


def workload(name: str, rv: str, ops: Any) -> dict[str, Any]:
    raw = ops if isinstance(ops, str) else json.dumps({"seq": len(ops), "ops": ops})
    return {
        "metadata": {
            "name": name,
            "namespace": "a",
            "resourceVersion": rv,
            "labels": {names.DEPLOY_ID: name},
            "annotations": {names.OPERATIONS: raw},
        }
    }


def test_the_ledger_key_index_follows_each_workloads_ledger_and_ignores_a_broken_one() -> None:
    """A key recorded in a workload's ledger is found by index, and forgotten once the ledger
    no longer holds it (mutation caught: an index built once and never moved would keep naming
    the old holder; a ledger that is not JSON would end the informer's thread)."""
    s = ObjectStore(WORKLOAD_INDEXERS)
    s.replace([workload("x", "1", [{"key": "k1", "seq": 1}]), workload("y", "2", "{not json")], "2")
    assert [o["metadata"]["name"] for o in s.by_index("ledger_key", "k1")] == ["x"]
    s.apply("MODIFIED", workload("x", "3", [{"key": "k2", "seq": 2}]))
    s.apply("MODIFIED", workload("y", "4", [{"key": "k1", "seq": 1}]))
    assert [o["metadata"]["name"] for o in s.by_index("ledger_key", "k1")] == ["y"]
    assert [o["metadata"]["name"] for o in s.by_index("ledger_key", "k2")] == ["x"]
