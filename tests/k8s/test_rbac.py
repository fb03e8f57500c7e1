"""Least privilege (SPEC R-K8S-6): the adapter works as its ServiceAccount, and only as that.

The adapter runs every kind of port call as the ServiceAccount of ``rbac.yaml`` (bound to the
pool's namespaces only), with a recorder on its HTTP transport. The test then shows both halves
of "exactly the verbs it uses": every call succeeded (nothing missing) and every (group,
resource, verb) the roles grant was used (nothing extra); and the identity is refused (403)
outside them — Secrets, deleting a Deployment, a namespace out of scope.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from gps_dagster.backends.k8s import ClusterCache, K8sCore, Kube, names, rbac
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import gpu_uuid, load_pool
from gps_dagster.ports import NotFound, Permanent
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s.layout import layout, remap
from gps_dagster.testing.k8s.pools import ClusterPool
from tests.k8s.cluster import T0_K8S, kube, unique

Grant = tuple[str, str, str]


def pool_doc(prefix: str) -> dict[str, Any]:
    name = "rbac"
    ts = gpu_uuid(name, f"{prefix}-n1", 7)
    return {
        "name": name,
        "nodes": [{"name": f"{prefix}-n1", "gpus": 8}, {"name": f"{prefix}-n2", "gpus": 8}],
        "projects": {"team": {"gpu_quota": 16}},
        "reservations": [
            {
                "id": "rsv-ts",
                "node": f"{prefix}-n1",
                "gpu_uuids": [ts],
                "namespace": "cmp-team",
                "mode": "time_sliced",
                "gpu_memory_mib": 10000,
                "headroom": "1",
            }
        ],
        "deploys": [
            {"id": "a", "gpus_per_replica": 2, "state": "running", "aliases": ["chat-prod"]},
            {"id": "t", "project": "team", "gpus_per_replica": 1},
            {"id": "wide", "gpus_per_replica": 2, "nodes_per_replica": 2},
            {"id": "auto", "kind": "deployment", "hpa": True, "gpus_per_replica": 1},
            {
                "id": "m1",
                "gpus_per_replica": 1,
                "state": "running",
                "reservation": {"mode": "time_sliced", "reservation": "rsv-ts", "memory_mib": 4000},
            },
            {
                "id": "m2",
                "gpus_per_replica": 1,
                "reservation": {"mode": "time_sliced", "reservation": "rsv-ts", "memory_mib": 4000},
            },
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def grant_of(method: str, url: str, *, watching: bool = False) -> Grant | None:
    """(API group, resource, verb) of one request; None for discovery."""
    parts = urlparse(url).path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if not rest:
        return None
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    verb = {
        "GET": "get" if named else ("watch" if watching else "list"),
        "PATCH": "patch",
        "POST": "create",
        "DELETE": "delete",
    }[method]
    return group, resource, verb


def granted() -> set[Grant]:
    out = set()
    for rules in rbac.rules().values():
        for rule in rules:
            out |= {
                (g, r, v)
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
            }
    return out


class Recorder:
    def __init__(self, api: Kube) -> None:
        self.seen: set[Grant] = set()
        rest = api.api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        query = kwargs.get("query_params", args[0] if args else None) or []
        watching = any(k == "watch" and str(v).lower() == "true" for k, v in query)
        grant = grant_of(method, url, watching=watching)
        if grant is not None:
            self.seen.add(grant)
        return self._inner(method, url, *args, **kwargs)


@pytest.fixture
def scoped(
    k8s_cluster: str, sqlite_url: str
) -> Iterator[tuple[K8sCore, Recorder, ClusterPool, Kube]]:
    prefix = unique("r")
    spec = load_pool(pool_doc(prefix))
    clock = VirtualClock(T0_K8S)
    engine = create_db_engine(sqlite_url)
    ensure_tables(engine)
    reservations = remap(spec, layout(spec, prefix), clock.now())
    for r in reservations:
        ReservationRepository(engine).create(r.spec(), at=clock.now(), actor="rbac")
    admin = kube()
    pool = ClusterPool(admin, clock, spec, prefix=prefix, reservations=reservations).create()
    system = pool.layout.system
    rbac.apply(admin, rbac.manifests(system=system, scope=pool.namespaces))
    config = yaml.safe_load(Path(k8s_cluster).read_text())
    cluster = config["clusters"][0]["cluster"]
    identity = rbac.as_identity(
        cluster["server"],
        cluster["certificate-authority"],
        rbac.service_account_token(admin, system),
    )
    recorder = Recorder(identity)
    core = K8sCore(
        identity,
        clock=clock,
        namespaces=pool.namespaces,
        ledger=ReservationRepository(engine),
        policy_namespace=system,
    )
    yield core, recorder, pool, identity
    pool.close()
    engine.dispose()


def test_the_adapter_works_as_its_service_account_with_exactly_the_granted_verbs(
    scoped: Any,
) -> None:
    core, recorder, pool, identity = scoped
    views = core.get_deploys(["a", "t", "wide", "auto", "m1", "m2"])
    assert set(views) == {"a", "t", "wide", "auto", "m1", "m2"}
    with pytest.raises(NotFound):
        core.get_deploy("nope")  # also looks for labelled StatefulSets, DaemonSets and Jobs
    assert core.alias_guard("a").aliases == ("chat-prod",)
    core.check_billing("t")
    assert core.check_quota("t", delta_replicas=1).quota == 16
    assert core.preview_capacity("a", delta_replicas=1).__class__.__name__ == "Fits"
    a = core.get_deploy("a")
    stop = core.stop("a", etag=a.etag, allow_aliased_downtime=True, idempotency_key="rbac/a/stop")
    assert core.get_operation(stop.id).id == stop.id
    wide = core.get_deploy("wide")
    op = core.start("wide", etag=wide.etag, idempotency_key="rbac/wide/start")
    assert core.get_operation(op.id).kind.value == "start"
    auto = core.get_deploy("auto")
    with pytest.raises(Permanent):
        core.set_replica_intent("auto", 2, etag=auto.etag, idempotency_key="rbac/auto/scale")
    m1 = core.get_deploy("m1")
    core.stop(
        "m1", etag=m1.etag, allow_aliased_downtime=False, idempotency_key="rbac/m1/stop"
    )  # holder pod
    m2 = core.get_deploy("m2")
    core.start(
        "m2", etag=m2.etag, idempotency_key="rbac/m2/start"
    )  # renders with the policy ConfigMap
    pool.settle()
    assert core.get_deploy("m2").state.value == "READY"  # a member runs again
    core.release_holder("m2")  # the converge of m2's start: the holder is deleted
    assert core.admission_preview("m1", delta_replicas=1).admitted
    assert core.describe("a")["workload"].startswith("Deployment/")  # reads the events too
    assert core.witness("m2").uuids and [d.id for d in core.reservation_deploys("rsv-ts")] == [
        "m1",
        "m2",
    ]
    watch_cache_as(identity, pool.namespaces)  # the process's watch cache: list + watch
    assert recorder.seen == granted(), f"unused grants: {granted() - recorder.seen}"


def watch_cache_as(identity: Kube, namespaces: tuple[str, ...]) -> None:
    """The watch cache of ``build_core``, as the identity: every informer lists and its watch
    opens (a watch refused with 403 would leave ``watches`` at 0)."""
    cache = ClusterCache(identity, namespaces, lws=identity.has_lws()).start()
    try:
        assert cache.wait_synced(60), cache.describe()
        deadline = time.monotonic() + 60
        while not all(i.state.watches for group in cache.informers.values() for i in group):
            assert time.monotonic() < deadline, cache.describe()
            time.sleep(0.05)
        assert cache.describe()["mode"] == "watch", cache.describe()
    finally:
        cache.stop()


def test_the_service_account_is_refused_outside_its_roles(scoped: Any) -> None:
    core, _, pool, identity = scoped
    ns = pool.layout.admin
    admin = kube()
    for call, args in (
        (identity.core.list_namespaced_secret, (ns,)),
        (identity.core.list_namespaced_config_map, (ns,)),
        (identity.apps.delete_namespaced_deployment, ("a", ns)),
    ):
        with pytest.raises(Permanent) as err:
            identity.call(call, *args, what="outside the roles")
        assert err.value.http_status == 403 and err.value.reason == "forbidden"
    outside = unique("x")
    admin.call(
        admin.core.create_namespace, {"metadata": {"name": outside}}, what="ns", mutating=True
    )
    try:
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "other", "labels": {names.DEPLOY_ID: "other"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "other"}},
                "template": {
                    "metadata": {"labels": {"app": "other"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        }
        admin.call(
            admin.apps.create_namespaced_deployment, outside, body, what="deploy", mutating=True
        )
        with pytest.raises(Permanent) as err:
            identity.merge_patch(
                identity.apps.patch_namespaced_deployment,
                "other",
                outside,
                body={"spec": {"replicas": 1}},
                what="out of scope",
            )
        assert err.value.http_status == 403
        with pytest.raises(NotFound):
            core.get_deploy("other")  # not in the adapter's namespaces: it does not even see it
    finally:
        admin.call(admin.core.delete_namespace, outside, what="ns", mutating=True)


def test_the_manifest_binds_the_deploy_roles_per_namespace_only_when_scoped() -> None:
    scoped = rbac.manifests(system="sys", scope=["ns-a", "ns-b"], holder_namespaces=["ns-b"])
    bindings = {
        (d["kind"], d["metadata"].get("namespace"), d["roleRef"]["name"])
        for d in scoped
        if d["kind"].endswith("Binding")
    }
    assert bindings == {
        ("ClusterRoleBinding", None, "gps-dagster-capacity"),
        ("RoleBinding", "ns-a", "gps-dagster-deploys-read"),
        ("RoleBinding", "ns-b", "gps-dagster-deploys-read"),
        ("RoleBinding", "ns-a", "gps-dagster-deploys-write"),
        ("RoleBinding", "ns-b", "gps-dagster-deploys-write"),
        ("RoleBinding", "ns-b", "gps-dagster-holders"),
        ("RoleBinding", "sys", "gps-dagster-policy"),
    }
    everywhere = rbac.manifests(system="sys")
    assert [d["roleRef"]["name"] for d in everywhere if d["kind"] == "ClusterRoleBinding"] == [
        "gps-dagster-capacity",
        "gps-dagster-deploys-read",
        "gps-dagster-deploys-write",
        "gps-dagster-holders",
    ]
    reader = rbac.manifests(system="sys", scope=["ns-a"], account="reader", readonly=True)
    assert {d["roleRef"]["name"] for d in reader if "roleRef" in d} == {
        "gps-dagster-capacity",
        "gps-dagster-deploys-read",
    }
    assert all(s["namespace"] == "sys" for d in scoped if "subjects" in d for s in d["subjects"])
    assert json.dumps(rbac.rules()["gps-dagster-capacity"])  # the file parses; the chart reuses it
