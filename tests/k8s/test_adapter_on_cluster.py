"""Kubernetes-specific behaviour of the adapter on the real control plane, beyond the contract:
write races on resourceVersion, hand edits, kinds it must refuse, the holder pod, read-back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gps_dagster.backends.k8s import K8sCore, Kube, ledger, names, pods
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.kinds import DeployKind
from gps_dagster.domain.pool import gpu_uuid, load_pool
from gps_dagster.domain.render import kai
from gps_dagster.ports import (
    AdmissionRefused,
    DeployState,
    EtagMismatch,
    Fits,
    Insufficient,
    Permanent,
)
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s.layout import layout, remap
from gps_dagster.testing.k8s.pools import ClusterPool
from tests.k8s.cluster import T0_K8S, kube, unique
from tests.k8s.world import rename_nodes


class Pool:
    def __init__(self, doc: dict[str, Any], db_url: str, *, prefix: str | None = None) -> None:
        prefix = prefix or unique("a")  # every namespace of the pool starts with it
        self.clock = VirtualClock(T0_K8S)
        self.spec = load_pool(rename_nodes(doc, prefix))
        self.engine = create_db_engine(db_url)
        ensure_tables(self.engine)
        rsvs = remap(self.spec, layout(self.spec, prefix), T0_K8S)
        for r in rsvs:
            ReservationRepository(self.engine).create(r.spec(), at=T0_K8S, actor="test")
        self.admin = kube()
        self.cluster = ClusterPool(
            self.admin, self.clock, self.spec, prefix=prefix, reservations=rsvs
        ).create()
        self.api = kube()
        self.core = K8sCore(
            self.api,
            clock=self.clock,
            namespaces=self.cluster.namespaces,
            ledger=ReservationRepository(self.engine),
            policy_namespace=self.cluster.layout.system,
        )

    def workload(self, deploy: str) -> tuple[str, str, str]:
        return self.cluster.workloads[deploy]

    def patch(self, deploy: str, body: dict[str, Any]) -> None:
        _, ns, name = self.workload(deploy)
        self.admin.merge_patch(
            self.admin.apps.patch_namespaced_deployment, name, ns, body=body, what="test"
        )

    def close(self) -> None:
        self.cluster.close()
        self.engine.dispose()


def two_deploys() -> dict[str, Any]:
    return {
        "name": "races",
        "nodes": [{"name": "n1", "gpus": 8}],
        "deploys": [
            {"id": "b", "gpus_per_replica": 2, "state": "running"},
            {"id": "c", "gpus_per_replica": 2},
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


@pytest.fixture
def pool(k8s_cluster: str, sqlite_url: str) -> Iterator[Pool]:
    made = Pool(two_deploys(), sqlite_url)
    yield made
    made.close()


def before_first_patch(api: Kube, action: Any) -> None:
    """Run ``action`` once, between the adapter's read and its workload PATCH (a racing writer)."""
    rest = api.api_client.rest_client
    inner = rest.request
    fired: list[bool] = []

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PATCH" and "/deployments/" in url and not fired:
            fired.append(True)
            action()
        return inner(method, url, *args, **kwargs)

    rest.request = request


def test_a_status_or_annotation_write_in_between_is_retried_not_a_conflict(pool: Pool) -> None:
    b = pool.core.get_deploy("b")
    before_first_patch(pool.api, lambda: pool.patch("b", {"metadata": {"labels": {"team": "x"}}}))
    op = pool.core.stop("b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert op.etag_after == pool.core.get_deploy("b").etag
    assert (
        len(ledger.read(pool.core.finder.find("b")).entries) == 1
    )  # applied once, on the fresh read


def test_a_spec_change_in_between_is_the_callers_etag_mismatch(pool: Pool) -> None:
    b = pool.core.get_deploy("b")
    before_first_patch(pool.api, lambda: pool.patch("b", {"spec": {"replicas": 2}}))
    with pytest.raises(EtagMismatch):
        pool.core.stop("b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    w = pool.core.finder.find("b")
    assert (
        w.replicas == 2 and ledger.read(w).entries == ()
    )  # the operator's scale stands, untouched


def test_the_etag_survives_the_controllers_status_writes(pool: Pool) -> None:
    c = pool.core.get_deploy("c")
    op = pool.core.start("c", etag=c.etag, idempotency_key="start-c")
    rv = pool.core.finder.find("c").resource_version
    pool.cluster.settle()  # pods created, bound, ready: the controllers rewrote the status
    assert pool.core.finder.find("c").resource_version != rv
    assert pool.core.get_deploy("c").state is DeployState.READY
    pool.core.stop("c", etag=op.etag_after, allow_aliased_downtime=False, idempotency_key="stop-c")


def test_a_manual_scale_is_an_etag_mismatch_for_a_stale_caller(pool: Pool) -> None:
    b = pool.core.get_deploy("b")
    pool.patch("b", {"spec": {"replicas": 0}})  # kubectl scale --replicas=0
    with pytest.raises(EtagMismatch):
        pool.core.set_replica_intent("b", 2, etag=b.etag, idempotency_key="k")


def test_other_labelled_kinds_are_reported_unsupported_and_duplicates_refused(pool: Pool) -> None:
    ns = pool.cluster.layout.admin
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "labels": {names.DEPLOY_ID: "db"}},
        "spec": {
            "serviceName": "db",
            "replicas": 0,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    pool.admin.call(
        pool.admin.apps.create_namespaced_stateful_set, ns, sts, what="sts", mutating=True
    )
    assert pool.core.get_deploy("db").kind is DeployKind.OTHER
    twin = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "b-twin", "labels": {names.DEPLOY_ID: "b"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "twin"}},
            "template": {
                "metadata": {"labels": {"app": "twin"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    pool.admin.call(
        pool.admin.apps.create_namespaced_deployment, ns, twin, what="twin", mutating=True
    )
    with pytest.raises(Permanent) as err:
        pool.core.get_deploy("b")
    assert err.value.reason == "duplicate_deploy_id" and "b-twin" in str(err.value)


def test_describe_reads_back_the_schedulers_verdict(pool: Pool) -> None:
    pool.patch(
        "c",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "serve",
                                "image": "x",
                                "resources": {
                                    "requests": {"cpu": "1000", names.GPU: "2"},
                                    "limits": {names.GPU: "2"},
                                },
                            }
                        ]
                    }
                }
            }
        },
    )
    c = pool.core.get_deploy("c")
    pool.core.start("c", etag=c.etag, idempotency_key="k")
    pool.cluster.settle()
    story = pool.core.describe("c")
    assert pool.core.get_deploy("c").unschedulable
    assert any("Insufficient cpu" in p["scheduling"] for p in story["pods"])
    inv = pool.core.inventory()
    assert [n.name for n in inv.nodes if n.name in pool.cluster.sim.nodes] and any(
        p.deploy == "c" for p in inv.pending
    )


def shared() -> dict[str, Any]:
    return {
        "name": "holder",
        "nodes": [{"name": "n1", "gpus": 8}],
        "reservations": [
            {
                "id": "rsv-ts",
                "node": "n1",
                "namespace": "cmp-team",
                "mode": "time_sliced",
                "gpu_memory_mib": 80000,
                "headroom": "1",
                "gpu_uuids": [gpu_uuid("holder", "n1", 0)],
            }
        ],
        "deploys": [
            {
                "id": "m1",
                "gpus_per_replica": 1,
                "state": "running",
                "reservation": {
                    "mode": "time_sliced",
                    "reservation": "rsv-ts",
                    "memory_mib": 30000,
                },
            },
            {
                "id": "m2",
                "gpus_per_replica": 1,
                "reservation": {
                    "mode": "time_sliced",
                    "reservation": "rsv-ts",
                    "memory_mib": 30000,
                },
            },
            {
                "id": "unrelated",
                "gpus_per_replica": 1,
                "state": "running",
            },  # not a member: no excuse
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 60}},
    }


def test_the_holder_pod_keeps_the_gpu_group_between_members(
    k8s_cluster: str, sqlite_url: str
) -> None:
    p = Pool(shared(), sqlite_url)
    try:
        ns = p.cluster.layout.reservation_namespaces["cmp-team"]
        holder = kai.holder_name("rsv-ts")

        def holder_pod() -> dict[str, Any] | None:
            found = p.admin.items(p.admin.core.list_namespaced_pod, ns, what="pods")
            return next((x for x in found if pods.name(x) == holder and not pods.deleting(x)), None)

        m1 = p.core.get_deploy("m1")
        p.core.stop("m1", etag=m1.etag, allow_aliased_downtime=False, idempotency_key="stop-m1")
        pod = holder_pod()
        assert pod is not None  # created before the last member left
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pods.annotations_of(pod)[kai.GPU_MEMORY_ANNOTATION] == str(kai.HOLDER_MEMORY_MIB)
        assert pod["spec"]["nodeSelector"][names.HOSTNAME] == p.spec.reservations[0].node
        m2 = p.core.get_deploy("m2")
        p.core.start("m2", etag=m2.etag, idempotency_key="start-m2")
        p.cluster.settle()
        assert p.core.get_deploy("m2").state is DeployState.STARTING and holder_pod() is not None
        p.clock.advance(60)
        p.cluster.settle()
        assert p.core.get_deploy("m2").state is DeployState.READY  # a member runs again
        assert holder_pod() is not None  # a read never writes (R-K8S-7)
        p.core.release_holder("m2")  # the engine's converge of m2's start does this
        p.core.release_holder("m2")  # already gone: success
        assert holder_pod() is None
        assert p.core.witness("m2").uuids == (gpu_uuid("holder", "n1", 0),)
    finally:
        p.close()


def bound_pair() -> dict[str, Any]:
    """One exclusive and one time-sliced reservation on n1, a member of each, and an unbound
    deploy."""
    uuids = [gpu_uuid("pair", "n1", i) for i in range(3)]
    return {
        "name": "pair",
        "nodes": [{"name": "n1", "gpus": 8}],
        "reservations": [
            {
                "id": "rsv-x",
                "node": "n1",
                "namespace": "serving",
                "mode": "exclusive",
                "gpu_memory_mib": 81559,
                "gpu_uuids": uuids[:2],
            },
            {
                "id": "rsv-ts",
                "node": "n1",
                "namespace": "cmp-team",
                "mode": "time_sliced",
                "gpu_memory_mib": 80000,
                "headroom": "1",
                "gpu_uuids": uuids[2:],
            },
        ],
        "deploys": [
            {
                "id": "x",
                "gpus_per_replica": 2,
                "reservation": {"mode": "exclusive", "reservations": ["rsv-x"]},
            },
            {
                "id": "m",
                "gpus_per_replica": 1,
                "reservation": {
                    "mode": "time_sliced",
                    "reservation": "rsv-ts",
                    "memory_mib": 30000,
                },
            },
            {"id": "plain", "gpus_per_replica": 1},
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def test_the_witness_is_the_node_agents_podresources_record(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """No pod carries a device annotation no real component writes (``nvidia.com/container.*``);
    the UUIDs come from the node agent's write path (fed, on the fake node, by the fake kubelet's
    PodResources record), and a time-sliced member's from its KAI reservation pod's device."""
    p = Pool(bound_pair(), sqlite_url)
    try:
        for d in ("x", "m"):
            p.core.start(d, etag=p.core.get_deploy(d).etag, idempotency_key=f"start-{d}")
        p.cluster.settle()
        assert {p.core.get_deploy(d).state for d in ("x", "m")} == {DeployState.READY}
        everything = p.admin.items(p.admin.core.list_pod_for_all_namespaces, what="pods")
        ours = [q for q in everything if pods.node(q) in p.cluster.sim.nodes]
        assert not [k for q in ours for k in pods.annotations_of(q) if k.startswith("nvidia.com/")]
        x, m = p.core.witness("x"), p.core.witness("m")
        assert set(x.uuids) == {gpu_uuid("pair", "n1", i) for i in range(2)}
        assert x.source == m.source == "node_agent_podresources"
        assert m.uuids == (gpu_uuid("pair", "n1", 2),)
        holders = [q for q in ours if pods.namespace(q) == "kai-resource-reservation"]
        assert [pods.gpus(q) for q in holders] == [
            1
        ]  # KAI's reservation pod holds the shared GPU whole
        p.core.stop(
            "m",
            etag=p.core.get_deploy("m").etag,
            allow_aliased_downtime=True,
            idempotency_key="stop-m",
        )
        p.core.release_holder("m")  # no member and no holder left: KAI frees the GPU
        p.cluster.settle()
        left = p.admin.items(
            p.admin.core.list_namespaced_pod, "kai-resource-reservation", what="pods"
        )
        assert not [q for q in left if pods.node(q) in p.cluster.sim.nodes]
    finally:
        p.close()


def test_no_witness_source_refuses_bound_deploys_with_witness_unavailable(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """GPS_WITNESS_SOURCE=none: a bound start would wait for a witness forever, so the preflight's
    admission preview and the start itself refuse it, with the fix; unbound work is unaffected."""
    p = Pool(bound_pair(), sqlite_url)
    try:
        core = K8sCore(
            p.api,
            clock=p.clock,
            namespaces=p.cluster.namespaces,
            ledger=ReservationRepository(p.engine),
            policy_namespace=p.cluster.layout.system,
            witness_source="none",
        )
        for d, rid in (("x", "rsv-x"), ("m", "rsv-ts")):
            seen = core.admission_preview(d, delta_replicas=1)
            assert (seen.admitted, seen.reason, seen.reservation_id) == (
                False,
                "witness_unavailable",
                rid,
            )
            assert "node agent" in seen.message and "GPS_WITNESS_SOURCE" in seen.message
            before = core.get_deploy(d)
            with pytest.raises(AdmissionRefused) as err:
                core.start(d, etag=before.etag, idempotency_key=f"start-{d}")
            assert err.value.reason == "witness_unavailable"
            assert core.get_deploy(d).etag == before.etag  # nothing written
        assert core.admission_preview("plain", delta_replicas=1).admitted
        core.start("plain", etag=core.get_deploy("plain").etag, idempotency_key="start-plain")
        assert p.core.admission_preview("x", delta_replicas=1).admitted  # the default: node_agent
    finally:
        p.close()


def held_pool() -> dict[str, Any]:
    """n1's GPUs 0-3 are exclusive reservation rsv-x; x binds all four; plain, big are unbound."""
    uuids = [gpu_uuid("held", "n1", i) for i in range(4)]
    return {
        "name": "held",
        "nodes": [{"name": "n1", "gpus": 8}],
        "reservations": [
            {
                "id": "rsv-x",
                "node": "n1",
                "namespace": "serving",
                "mode": "exclusive",
                "gpu_memory_mib": 81559,
                "gpu_uuids": uuids,
            },
        ],
        "deploys": [
            {
                "id": "x",
                "gpus_per_replica": 4,
                "reservation": {"mode": "exclusive", "reservations": ["rsv-x"]},
            },
            {"id": "plain", "gpus_per_replica": 4},
            {"id": "big", "gpus_per_replica": 5},
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def test_an_exclusive_reservation_is_held_by_a_pod_and_handed_over_to_its_deploy(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """The fake node advertises all 8 GPUs (no component hides reserved ones); what keeps unbound
    work off rsv-x is the holder pod the fenced writes create: before an unbound start, deleted by
    x's start (the hand-over), created again by x's stop. The scheduler counts it like any pod."""
    p = Pool(held_pool(), sqlite_url)
    try:
        (node,) = p.cluster.sim.nodes
        obj = p.admin.call(p.admin.core.read_node, node, what="node")
        assert obj["status"]["allocatable"][names.GPU] == "8"
        big = p.core.preview_capacity("big", delta_replicas=1)
        assert isinstance(big, Insufficient)  # the start holds rsv-x first
        assert isinstance(p.core.preview_capacity("plain", delta_replicas=1), Fits)
        p.core.start("plain", etag=p.core.get_deploy("plain").etag, idempotency_key="start-plain")
        p.cluster.settle()
        ns = p.cluster.reservations["rsv-x"].namespace
        name = kai.holder_name("rsv-x")
        holder = p.admin.call(p.admin.core.read_namespaced_pod, name, ns, what="holder")
        labels = pods.labels(holder)
        assert labels[kai.ROLE_LABEL] == "holder" and names.DEPLOY_ID not in labels
        assert (pods.node(holder), pods.gpus(holder)) == (node, 4)
        unreserved = {gpu_uuid("held", "n1", i) for i in range(4, 8)}
        assert set(p.core.witness("plain").uuids) == unreserved
        assert p.core.get_deploy("x").state is DeployState.STOPPED  # the holder is no pod of x
        p.core.start("big", etag=p.core.get_deploy("big").etag, idempotency_key="start-big")
        p.cluster.settle()
        assert p.core.get_deploy("big").unschedulable  # 8 − holder 4 − plain 4: nothing left
        p.core.stop(
            "plain",
            etag=p.core.get_deploy("plain").etag,
            allow_aliased_downtime=True,
            idempotency_key="stop-plain",
        )
        p.core.stop(
            "big",
            etag=p.core.get_deploy("big").etag,
            allow_aliased_downtime=True,
            idempotency_key="stop-big",
        )
        p.core.start("x", etag=p.core.get_deploy("x").etag, idempotency_key="start-x")
        p.cluster.settle()
        left = p.admin.items(
            p.admin.core.list_namespaced_pod,
            ns,
            what="pods",
            label_selector=f"{kai.ROLE_LABEL}=holder",
        )
        assert left == []  # handed over
        assert p.core.get_deploy("x").state is DeployState.READY
        assert set(p.core.witness("x").uuids) == {gpu_uuid("held", "n1", i) for i in range(4)}
        p.core.stop(
            "x",
            etag=p.core.get_deploy("x").etag,
            allow_aliased_downtime=True,
            idempotency_key="stop-x",
        )
        p.cluster.settle()
        again = p.admin.call(p.admin.core.read_namespaced_pod, name, ns, what="holder")
        assert pods.node(again) == node and p.core.get_deploy("x").state is DeployState.STOPPED
    finally:
        p.close()
