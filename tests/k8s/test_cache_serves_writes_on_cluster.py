"""What a write and a preview read on the watch cache, on the real control plane (fake nodes).

A stop's alias guard and a start's quota preflight read the cache's alias Services and
ResourceQuotas (no LIST per write), and still refuse on what the cache has seen; a preview
parses each bound pod's requests once per resourceVersion, not once per preview; the
idempotency-key check of a write reads the ledger of the workloads its key index names, not of
every labelled workload. Requests are counted at the adapter's transport
(``test_watch_cache_on_cluster.Requests``); parses and ledger reads by wrapping the functions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gps_dagster.backends.k8s import cache as cache_mod
from gps_dagster.backends.k8s import ledger, names, pods
from gps_dagster.backends.k8s.workloads import Workload, read
from gps_dagster.ports import AdmissionRefused, EtagMismatch, Fits, Permanent, QuotaRefused
from tests.k8s.test_adapter_on_cluster import Pool
from tests.k8s.test_watch_cache_on_cluster import Cached, lists, until


def six_running() -> dict[str, Any]:
    """Six running 1-GPU deploys and one stopped on one 8-GPU node: six bound pods."""
    deploys: list[dict[str, Any]] = [
        {"id": f"r{i}", "gpus_per_replica": 1, "state": "running"} for i in range(6)
    ]
    deploys.append({"id": "c", "gpus_per_replica": 1})
    return {
        "name": "six",
        "nodes": [{"name": "n1", "gpus": 8}],
        "deploys": deploys,
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


@pytest.fixture
def six(k8s_cluster: str, sqlite_url: str) -> Iterator[Cached]:
    pool = Pool(six_running(), sqlite_url)
    c = Cached(pool)
    try:
        yield c
    finally:
        c.core.close()
        pool.close()


def listed(c: Cached, mark: int, *resources: str) -> list[str]:
    """The LISTs of these resources sent since ``mark``."""
    return [
        u
        for u in lists(c.requests.since(mark))
        if u.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] in resources
    ]


def test_a_stop_and_a_start_send_no_list_of_services_or_quotas_and_still_refuse_on_them(
    six: Cached,
) -> None:
    """Mutations caught: the alias guard, the quota preflight or the start's holder-pod lookup
    (a reservation ledger is wired) back on a LIST per write (the first half's counts), or the
    cache's answer ignored — an alias Service or a quota the cache
    has seen no longer refusing (the second half)."""
    core, api = six.core, six.pool.api
    mark = six.requests.mark()
    r0 = core.get_deploy("r0")
    core.stop("r0", etag=r0.etag, allow_aliased_downtime=False, idempotency_key="stop-r0")
    c = core.get_deploy("c")
    core.start("c", etag=c.etag, idempotency_key="start-c")
    assert listed(six, mark, "services", "resourcequotas") == []
    assert lists(six.requests.since(mark)) == []  # the holder pods too: no LIST at all

    _, ns, _ = six.pool.workload("r1")
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "r1-api", "labels": {names.ALIAS_OF: "r1"}},
        "spec": {"ports": [{"port": 80}], "selector": {names.DEPLOY_ID: "r1"}},
    }
    api.call(api.core.create_namespaced_service, ns, svc, what="svc", mutating=True)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus"},
        "spec": {"hard": {f"requests.{names.GPU}": "0"}},
    }
    _, ns0, _ = six.pool.workload("r0")
    api.call(api.core.create_namespaced_resource_quota, ns0, quota, what="quota", mutating=True)
    until(lambda: bool(six.cache.services(ns)), "the alias Service in the cache")
    until(lambda: bool(six.cache.quotas(ns0)), "the quota in the cache")
    mark = six.requests.mark()
    r1 = core.get_deploy("r1")
    with pytest.raises(AdmissionRefused, match="r1-api"):
        core.stop("r1", etag=r1.etag, allow_aliased_downtime=False, idempotency_key="stop-r1")
    stopped = core.get_deploy("r0")
    with pytest.raises(QuotaRefused, match="hard 0"):
        core.start("r0", etag=stopped.etag, idempotency_key="start-r0")
    assert listed(six, mark, "services", "resourcequotas") == []


def test_a_preview_parses_each_bound_pod_once_per_resource_version(
    six: Cached, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutations caught: the preview parsing every bound pod's requests again (before: six
    parses a preview here, ~700 a preview in the storm), or a memo keyed without the
    resourceVersion (a changed pod would keep its old requests)."""

    def ours() -> list[pods.Pod]:  # other tests' pods may still be terminating elsewhere
        spaces = set(six.pool.cluster.namespaces)
        return [p for p in six.core.holding_pods() if pods.namespace(p) in spaces]

    bound = {pods.name(p): p for p in ours()}
    assert len(bound) == 6
    parsed: list[int] = []
    inner = pods.spec_requests

    def counting(spec: Any) -> pods.Requests:
        parsed.append(id(spec))
        return inner(spec)

    monkeypatch.setattr(pods, "spec_requests", counting)
    monkeypatch.setattr(cache_mod, "spec_requests", counting, raising=False)  # absent before

    def bound_parses() -> list[str]:
        cached = {id(p.get("spec")): pods.name(p) for p in ours()}
        return sorted(cached[i] for i in parsed if i in cached)

    assert six.core.preview_capacity("c", delta_replicas=1) == Fits(groups=1)
    assert bound_parses() == sorted(bound)  # the first preview parses each pod once
    parsed.clear()
    assert six.core.preview_capacity("c", delta_replicas=2) == Fits(groups=2)
    assert bound_parses() == []  # the next ones parse none of them

    one = sorted(bound)[0]
    version = (bound[one].get("metadata") or {}).get("resourceVersion")
    admin = six.pool.admin
    admin.merge_patch(
        admin.core.patch_namespaced_pod,
        one,
        pods.namespace(bound[one]),
        body={"metadata": {"labels": {"touched": "yes"}}},
        what="touch a pod",
    )
    until(
        lambda: any(
            pods.name(p) == one and p["metadata"]["resourceVersion"] != version for p in ours()
        ),
        "the touched pod's new version in the cache",
    )
    parsed.clear()
    assert six.core.preview_capacity("c", delta_replicas=2) == Fits(groups=2)
    assert bound_parses() == [one]  # only the pod whose version moved is parsed again


def test_the_key_check_of_a_write_reads_only_the_ledgers_its_key_index_names(
    six: Cached, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutations caught: the key check scanning (and parsing the ledger of) every labelled
    workload on each write (before: the six others here, ~600 a write in the storm), or the
    index missing a key a workload's ledger records (a reused key no longer refused)."""
    read: list[str] = []
    inner = ledger.read

    def counting(w: Workload) -> ledger.Ledger:
        read.append(w.deploy_id)
        return inner(w)

    monkeypatch.setattr(ledger, "read", counting)
    r0 = six.core.get_deploy("r0")
    six.core.stop("r0", etag=r0.etag, allow_aliased_downtime=False, idempotency_key="k-r0")
    assert set(read) == {"r0"}  # the written workload's own ledger only

    until(
        lambda: bool(six.cache.workloads_with_key("deployments", "k-r0")),
        "the ledger entry in the cache's key index",
    )
    read.clear()
    r1 = six.core.get_deploy("r1")
    with pytest.raises(Permanent, match="was used for r0") as refused:
        six.core.stop("r1", etag=r1.etag, allow_aliased_downtime=False, idempotency_key="k-r0")
    assert refused.value.reason == "idempotency_key_reused"
    assert set(read) == {"r0", "r1"}  # its own, and the one the index names


def test_an_unbound_stop_and_start_scan_no_workload_when_no_exclusive_reservation_applies(
    six: Cached, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutations caught: the stop's R-GPS-2 hold (``before_stop``) or the start's hold before
    lending (``hold_idle``) reading every labelled workload for a deploy no reservation binds
    while the ledger holds no exclusive reservation (before: one scan of every workload per
    write, 2,000 a write in the 1,000-swap storm: the storm's releases grew with its square)."""
    scans: list[int] = []
    finder = six.core.finder
    inner = finder.all_labelled

    def counting() -> list[Workload]:
        found = inner()
        scans.append(len(found))
        return found

    monkeypatch.setattr(finder, "all_labelled", counting)
    r0 = six.core.get_deploy("r0")
    six.core.stop("r0", etag=r0.etag, allow_aliased_downtime=False, idempotency_key="scan-r0")
    c = six.core.get_deploy("c")
    six.core.start("c", etag=c.etag, idempotency_key="scan-c")
    assert scans == []
    assert six.core.get_deploy("c").desired_replicas == 1  # the start was made, not skipped


def writes_sent(c: Cached, mark: int) -> list[tuple[str, str]]:
    """The requests since ``mark`` that are not watches: (method, last path segment)."""
    return [
        (m, u.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        for m, u in c.requests.since(mark)
        if "watch=true" not in u.lower()
    ]


def test_a_write_on_the_cache_sends_its_patch_alone(six: Cached) -> None:
    """Mutation caught: a GET of the workload before every write (before: 2 requests a write,
    the storm's 2,000 GETs at 1,000 swaps)."""
    r0 = six.core.get_deploy("r0")
    _, _, name = six.pool.workload("r0")
    mark = six.requests.mark()
    six.core.stop("r0", etag=r0.etag, allow_aliased_downtime=False, idempotency_key="one-r0")
    assert writes_sent(six, mark) == [("PATCH", name)]


def test_a_stale_cached_copy_costs_a_retry_not_a_lost_or_doubled_write(
    six: Cached, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutations caught: the patch sent without the copy's resourceVersion (the out-of-band
    annotation is then lost or the 409 never comes: no GET below), or the 409 of a stale copy
    ending the write instead of a read from the API server and one more patch."""
    stale = six.core.finder.find("r1")
    r1 = six.core.get_deploy("r1")
    six.pool.patch("r1", {"metadata": {"annotations": {"example.com/owner": "ops"}}})
    monkeypatch.setattr(six.core.finder, "find", lambda deploy_id: stale)
    _, _, name = six.pool.workload("r1")
    mark = six.requests.mark()
    six.core.stop("r1", etag=r1.etag, allow_aliased_downtime=False, idempotency_key="stale-r1")
    sent = writes_sent(six, mark)
    # PATCH on the cached copy, its 409, then GET + PATCH. The Deployment controller may write
    # r1's status between that GET and PATCH (a loaded CI run saw it): one more 409 and
    # GET + PATCH, the same rule again, so the retries are a pattern and not a count.
    assert sent[:3] == [("PATCH", name), ("GET", name), ("PATCH", name)]
    assert sent[3:] == [("GET", name), ("PATCH", name)] * ((len(sent) - 3) // 2)
    now = read_workload(six, "r1")
    assert now.raw["spec"]["replicas"] == 0
    assert now.raw["metadata"]["annotations"]["example.com/owner"] == "ops"
    assert len(ledger.read(now).entries) == 1  # written once


def test_nothing_to_write_on_a_stale_cached_copy_is_decided_again_on_the_api_servers(
    six: Cached, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation caught: a start answered "already running" from a cached copy that is not
    (the API server has the deploy stopped): the step would count a start never made."""
    six.pool.patch("c", {"spec": {"replicas": 1}})
    until(lambda: six.core.finder.find("c").replicas == 1, "the cache seeing c scaled to 1")
    running = six.core.finder.find("c")
    etag = six.core.get_deploy("c").etag
    six.pool.patch("c", {"spec": {"replicas": 0}})
    monkeypatch.setattr(six.core.finder, "find", lambda deploy_id: running)
    _, _, name = six.pool.workload("c")
    mark = six.requests.mark()
    with pytest.raises(EtagMismatch):  # the API server's c is not the one the caller read
        six.core.start("c", etag=etag, idempotency_key="stale-c")
    assert ("GET", name) in writes_sent(six, mark)


def read_workload(c: Cached, deploy: str) -> Workload:
    kind, ns, name = c.pool.workload(deploy)
    return read(c.pool.api, kind, ns, name)
