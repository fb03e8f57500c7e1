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
from gps_dagster.backends.k8s.workloads import Workload
from gps_dagster.ports import AdmissionRefused, Fits, Permanent, QuotaRefused
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
