"""Issue 18's wrong verdicts, each on the real control plane: what was true only in the fakes.

Every test here failed on the adapter before its fix (the closing note of issue 18 says how each
was seen failing); the names say the defect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gps_dagster.backends.k8s import names
from gps_dagster.domain.gps.billing import reservation_project
from gps_dagster.domain.kinds import DeployKind
from gps_dagster.domain.pool import gpu_uuid
from gps_dagster.domain.render import kai
from gps_dagster.engine.outcomes import from_core_error
from gps_dagster.ports import AdmissionRefused, DeployState, EtagMismatch, Permanent, Unsupported
from tests.k8s.cluster import unique
from tests.k8s.test_adapter_on_cluster import Pool, bound_pair, two_deploys
from tests.k8s.test_reads_never_write import Writes


def deployment(
    name: str,
    deploy_id: str,
    *,
    replicas: int = 0,
    gpus: int = 1,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A tenant's Deployment as people write them: an ``app:`` selector, RollingUpdate."""
    pod_labels = {"app": name, names.DEPLOY_ID: deploy_id}
    resources = {"requests": {names.GPU: str(gpus)}, "limits": {names.GPU: str(gpus)}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {names.DEPLOY_ID: deploy_id, **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "containers": [{"name": "serve", "image": "serve:1", "resources": resources}],
                    "automountServiceAccountToken": False,
                    **(spec or {}),
                },
            },
        },
    }


def create(p: Pool, namespace: str, body: dict[str, Any]) -> None:
    p.admin.call(
        p.admin.apps.create_namespaced_deployment, namespace, body, what="create", mutating=True
    )


def read_deployment(p: Pool, namespace: str, name: str) -> dict[str, Any]:
    return p.admin.call(p.admin.apps.read_namespaced_deployment, name, namespace, what="read")


# -- item 2: exclusive bindings are namespace and project checked ---------------------------------


def exclusive() -> dict[str, Any]:
    return {
        "name": "exclusive",
        "nodes": [{"name": "n1", "gpus": 8}],
        "reservations": [
            {
                "id": "rsv-x",
                "node": "n1",
                "namespace": "cmp-team",
                "mode": "exclusive",
                "gpu_memory_mib": 80000,
                "gpu_uuids": [gpu_uuid("exclusive", "n1", 0), gpu_uuid("exclusive", "n1", 1)],
            }
        ],
        "deploys": [
            {
                "id": "own",
                "gpus_per_replica": 1,
                "reservation": {"mode": "exclusive", "reservations": ["rsv-x"]},
            }
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


@pytest.fixture
def excl(k8s_cluster: str, sqlite_url: str) -> Iterator[Pool]:
    made = Pool(exclusive(), sqlite_url)
    yield made
    made.close()


def test_an_exclusive_binding_in_another_tenants_namespace_is_refused_not_rendered(
    excl: Pool,
) -> None:
    other = excl.cluster.layout.admin  # not the reservation's namespace
    binding = json.dumps({"mode": "exclusive", "reservations": ["rsv-x"]})
    create(
        excl,
        other,
        deployment(
            "impostor",
            "impostor",
            labels={names.PROJECT: "evil"},
            annotations={names.RESERVATION: binding},
        ),
    )
    preview = excl.core.admission_preview("impostor", delta_replicas=1)
    assert not preview.admitted and preview.reason == "reservation_namespace_mismatch"
    view = excl.core.get_deploy("impostor")
    with pytest.raises(AdmissionRefused) as refused:
        excl.core.start("impostor", etag=view.etag, idempotency_key="k")
    assert refused.value.reason == "reservation_namespace_mismatch"
    after = read_deployment(excl, other, "impostor")
    assert after["spec"]["replicas"] == 0  # nothing written: no render onto the node
    assert names.HOSTNAME not in (after["spec"]["template"]["spec"].get("nodeSelector") or {})


def test_a_reservation_bound_render_takes_its_queue_from_the_reservation_not_a_label(
    excl: Pool,
) -> None:
    _, ns, name = excl.workload("own")
    excl.patch("own", {"metadata": {"labels": {names.PROJECT: "someone-else"}}})
    view = excl.core.get_deploy("own")
    excl.core.start("own", etag=view.etag, idempotency_key="k")
    labels = read_deployment(excl, ns, name)["spec"]["template"]["metadata"]["labels"]
    policy = excl.core.gps.policy()
    assert labels[kai.QUEUE_LABEL] == policy.queue_for(ns)  # the reservation's namespace
    assert labels[kai.QUEUE_LABEL] != policy.queue_for("someone-else")


@pytest.mark.parametrize(
    ("doc", "deploy", "rid"),
    [(exclusive, "own", "rsv-x"), (bound_pair, "m", "rsv-ts")],  # exclusive, time-sliced
    ids=["exclusive", "time_sliced"],
)
def test_a_reservation_of_one_project_is_refused_to_a_workload_labelled_another(
    k8s_cluster: str, sqlite_url: str, doc: Any, deploy: str, rid: str
) -> None:
    """Issue 18 item 2: in the reservation's own namespace, a workload whose project label names
    another project is refused (``reservation_project_mismatch``) at the preview and at start, and
    nothing is written; labelled with the reservation's project it starts.

    Every namespace of the pool starts ``cmp-``, so the reservation's namespace is a CMP project's
    (``cmp-<project>``, ``reservation_project``) as on a CMP cluster; under the default prefix it
    is an admin namespace and no project is checked at all.

    Mutations caught: dropping the project comparison of ``check_scope`` (or inverting it, or
    reading the owner from the label instead of the reservation) fails the first half; refusing
    every labelled workload fails the second."""
    p = Pool(doc(), sqlite_url, prefix=unique("cmp-"))
    try:
        _, ns, name = p.workload(deploy)
        rsv = p.cluster.reservations[rid]
        owner = reservation_project(rsv)
        assert owner is not None and rsv.namespace == ns  # same namespace: only the project differs
        before = read_deployment(p, ns, name)
        p.patch(deploy, {"metadata": {"labels": {names.PROJECT: "someone-else"}}})
        preview = p.core.admission_preview(deploy, delta_replicas=1)
        assert (preview.admitted, preview.reason) == (False, "reservation_project_mismatch")
        view = p.core.get_deploy(deploy)
        with pytest.raises(AdmissionRefused) as refused:
            p.core.start(deploy, etag=view.etag, idempotency_key="k-other")
        assert refused.value.reason == "reservation_project_mismatch"
        assert owner in str(refused.value) and "someone-else" in str(refused.value)
        after = read_deployment(p, ns, name)
        assert after["spec"] == before["spec"]  # nothing rendered, nothing scaled
        assert names.OPERATIONS not in (after["metadata"].get("annotations") or {})

        p.patch(deploy, {"metadata": {"labels": {names.PROJECT: owner}}})
        assert p.core.admission_preview(deploy, delta_replicas=1).admitted
        view = p.core.get_deploy(deploy)
        p.core.start(deploy, etag=view.etag, idempotency_key="k-own")
        started = read_deployment(p, ns, name)
        assert started["spec"]["replicas"] == 1
        assert started["spec"]["template"]["spec"]["nodeSelector"][names.HOSTNAME] == rsv.node
    finally:
        p.close()


# -- item 7: a LeaderWorkerSet is READY on every supported LWS release -----------------------------


def multi_node() -> dict[str, Any]:
    return {
        "name": "lws",
        "nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}],
        "deploys": [{"id": "big", "gpus_per_replica": 16, "nodes_per_replica": 2}],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


@pytest.mark.parametrize("shape", ["v0.8", "v0.9"])
def test_a_leaderworkerset_gets_ready_with_either_lws_status_shape(
    k8s_cluster: str, sqlite_url: str, shape: str
) -> None:
    p = Pool(multi_node(), sqlite_url)
    try:
        p.cluster.lws.shape = shape  # v0.8: no observedGeneration in the status at all
        view = p.core.get_deploy("big")
        op = p.core.start("big", etag=view.etag, idempotency_key="start")
        p.cluster.settle()
        ready = p.core.get_deploy("big")
        assert ready.state is DeployState.READY and ready.ready_replicas == 1
        p.core.stop("big", etag=op.etag_after, allow_aliased_downtime=False, idempotency_key="s")
        p.cluster.settle()
        assert p.core.get_deploy("big").converged_stopped
    finally:
        p.close()


# -- item 12: GitOps owners are refused; foreign annotations are no conflict ---------------------


@pytest.fixture
def pair(k8s_cluster: str, sqlite_url: str) -> Iterator[Pool]:
    made = Pool(two_deploys(), sqlite_url)
    yield made
    made.close()


def test_a_foreign_annotation_only_change_is_not_an_etag_mismatch(pair: Pool) -> None:
    b = pair.core.get_deploy("b")  # the engine's read
    tracking = {"argocd.argoproj.io/tracking-id": "gpu:apps/Deployment:ns/b"}
    pair.patch("b", {"metadata": {"annotations": tracking}})  # generation + 1 on a Deployment
    op = pair.core.stop("b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert op.etag_after == pair.core.get_deploy("b").etag  # predicted exactly
    pair.patch("b", {"metadata": {"annotations": {"reloader.stakater.com/last": "x"}}})
    c = pair.core.get_deploy("c")
    pair.patch("c", {"spec": {"replicas": 2}})  # a spec change still is one
    with pytest.raises(EtagMismatch):
        pair.core.start("c", etag=c.etag, idempotency_key="kc")


def owned_replica_sets(p: Pool, deploy: str) -> list[dict[str, Any]]:
    """The ReplicaSets the Deployment controller made for ``deploy`` (ownerReference = its uid)."""
    _, ns, name = p.workload(deploy)
    uid = read_deployment(p, ns, name)["metadata"]["uid"]
    found = p.admin.items(p.admin.apps.list_namespaced_replica_set, ns, what="list replicasets")
    return [
        r
        for r in found
        if any(o.get("uid") == uid for o in r["metadata"].get("ownerReferences") or [])
    ]


def wait_replica_set_copy(p: Pool, deploy: str, want: dict[str, str]) -> dict[str, Any]:
    """Poll (bounded) until the controller has copied ``want`` onto a ReplicaSet of ``deploy``
    and observed the Deployment's generation; that ReplicaSet."""
    _, ns, name = p.workload(deploy)
    deadline = time.monotonic() + 60
    while True:
        d = read_deployment(p, ns, name)
        observed = (d.get("status") or {}).get("observedGeneration") == d["metadata"]["generation"]
        for rs in owned_replica_sets(p, deploy):
            notes = rs["metadata"].get("annotations") or {}
            if observed and all(notes.get(k) == v for k, v in want.items()):
                return rs
        if time.monotonic() > deadline:
            raise AssertionError(f"{deploy}: {sorted(want)} never copied onto its ReplicaSet")
        time.sleep(0.1)


def test_the_ledger_the_controller_copies_onto_replicasets_is_never_read_as_the_workload(
    pair: Pool,
) -> None:
    """Issue 18 item 12: the Deployment controller copies every annotation of a Deployment (all
    but its revision/apply/replica bookkeeping: ``copyDeploymentAnnotationsToReplicaSet`` and
    ``annotationsToSkip`` in kubernetes/kubernetes pkg/controller/deployment/util/
    deployment_util.go) onto its ReplicaSet, and the ReplicaSet also carries the pod template's
    labels, ``gps.dagster.io/deploy-id`` among them. So after a stop the ReplicaSet looks like a
    second copy of the workload, ledger and all: the product must still read the one Deployment —
    no duplicate, the ETag it predicted holds once the controller has copied and written the
    status, and a resubmit is replayed from the ledger without a write.

    Mutations caught: an ETag from ``resourceVersion`` (the controller's status write after the
    copy moves it) fails the ETag equality; a finder that also lists ReplicaSets (or any kind the
    template's labels reach) sees ``duplicate_deploy_id``; a ledger lookup that misses its own
    entry writes a second time (the resourceVersion moves)."""
    p = pair
    _, ns, name = p.workload("b")
    before = p.core.get_deploy("b")
    op = p.core.stop("b", etag=before.etag, allow_aliased_downtime=False, idempotency_key="k")
    written = read_deployment(p, ns, name)["metadata"]["annotations"]
    product = {k: v for k, v in written.items() if k.startswith(names.PREFIX)}
    assert names.OPERATIONS in product and '"key":"k"' in product[names.OPERATIONS]
    rs = wait_replica_set_copy(p, "b", product)  # the ledger (and the replicas memo) copied
    assert rs["metadata"]["labels"][names.DEPLOY_ID] == "b"  # and the deploy-id label too
    assert rs["spec"]["replicas"] == 0

    view = p.core.get_deploy("b")  # one workload, read from the Deployment only
    assert (view.kind, view.state) == (DeployKind.DEPLOYMENT, DeployState.STOPPED)
    assert view.etag == op.etag_after
    assert set(p.core.get_deploys(["b", "c"])) == {"b", "c"}  # the batched read: no duplicate
    # Counted at the adapter's own transport: the Deployment controller may still write status
    # (its resourceVersion moved under a resourceVersion comparison, flaky in CI).
    writes = Writes(p.api)
    again = p.core.stop("b", etag=before.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert again.id == op.id and p.core.get_operation(op.id).idempotency_key == "k"
    assert writes.seen == [], writes.seen  # no second write

    start = p.core.start("b", etag=view.etag, idempotency_key="k2")  # the same ReplicaSet again
    after = read_deployment(p, ns, name)["metadata"]["annotations"][names.OPERATIONS]
    wait_replica_set_copy(p, "b", {names.OPERATIONS: after})
    assert p.core.get_deploy("b").etag == start.etag_after
    assert len(owned_replica_sets(p, "b")) == 1


@pytest.mark.parametrize("deploy", ["x", "m"])  # exclusive, time-sliced member
def test_a_start_that_renders_the_template_predicts_its_etag_and_the_next_write_takes_it(
    k8s_cluster: str, sqlite_url: str, deploy: str
) -> None:
    """A reservation-bound start patches the pod template (a new ReplicaSet, the ledger copied
    onto it); its ``etag_after`` is the ETag of the object the API server returns, so the next
    mutation can use it (the port's contract), and the stop that follows replays.

    The API server always serialises a template's ``metadata.creationTimestamp`` (as ``null``:
    "Kubernetes outputs creationTimestamp: null in a blank object", weaveworks/kubediff#89); the
    render kept only labels and annotations, so the patch asked to delete it, the prediction did,
    the server did not: every bound start's ``etag_after`` was stale at once (the stop below was
    an ``EtagMismatch``). Mutation caught: the render dropping template metadata other than labels
    and annotations (``rendered_template`` returning the bare render)."""
    p = Pool(bound_pair(), sqlite_url)
    try:
        _, ns, name = p.workload(deploy)
        op = p.core.start(deploy, etag=p.core.get_deploy(deploy).etag, idempotency_key="k1")
        assert p.core.get_deploy(deploy).etag == op.etag_after
        after = read_deployment(p, ns, name)["metadata"]["annotations"][names.OPERATIONS]
        rs = wait_replica_set_copy(p, deploy, {names.OPERATIONS: after})
        assert rs["spec"]["template"]["metadata"]["labels"].get(kai.RESERVATION_LABEL)  # rendered
        stop = p.core.stop(
            deploy, etag=op.etag_after, allow_aliased_downtime=True, idempotency_key="k2"
        )
        assert p.core.get_deploy(deploy).etag == stop.etag_after
    finally:
        p.close()


def server_side_apply(p: Pool, deploy: str, manager: str, replicas: int) -> None:
    _, ns, name = p.workload(deploy)
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    }
    p.admin.call(
        p.admin.apps.patch_namespaced_deployment,
        name,
        ns,
        body,
        field_manager=manager,
        force=True,
        _content_type="application/apply-patch+yaml",
        what="apply",
        mutating=True,
    )


def test_a_gitops_owner_of_replicas_makes_the_deploy_ineligible_not_reverted(pair: Pool) -> None:
    server_side_apply(pair, "b", "kustomize-controller", 1)  # Flux owns spec.replicas
    b = pair.core.get_deploy("b")
    with pytest.raises(Unsupported) as refused:
        pair.core.stop("b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert refused.value.reason == "gitops_owned" and "kustomize-controller" in str(refused.value)
    assert from_core_error(refused.value).reason == "gitops_owned"
    _, ns, name = pair.workload("b")
    assert read_deployment(pair, ns, name)["spec"]["replicas"] == 1  # nothing written


# -- item 11: an API-side refusal after a passed preflight is said at once -------------------------


def limit_cpu_min(p: Pool, namespace: str, minimum: str = "20m") -> None:
    """A LimitRange the preflight knows nothing of: every container must ask >= ``minimum``."""
    body = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "cpu-floor"},
        "spec": {"limits": [{"type": "Container", "min": {"cpu": minimum}}]},
    }
    p.admin.call(
        p.admin.core.create_namespaced_limit_range,
        namespace,
        body,
        what="limitrange",
        mutating=True,
    )


def test_a_replicaset_failed_create_is_read_as_the_api_servers_refusal(pair: Pool) -> None:
    _, ns, _ = pair.workload("c")
    limit_cpu_min(pair, ns)
    c = pair.core.get_deploy("c")
    pair.core.start("c", etag=c.etag, idempotency_key="k")
    seen = None
    for _ in range(50):  # the controllers write the condition within a few syncs (wall time)
        pair.cluster.settle()
        seen = pair.core.get_deploy("c")
        if seen.refused:
            break
        time.sleep(0.1)
    assert seen is not None and seen.refused is not None
    assert "FailedCreate" in seen.refused and "minimum cpu usage per Container" in seen.refused
    assert seen.state is DeployState.STARTING and not seen.unschedulable


# -- item 3 (part): controller-owned workloads are refused, a duplicate id stays its own problem ---


def test_a_controller_owned_deployment_is_refused_with_its_owner_kind(pair: Pool) -> None:
    ns = pair.cluster.layout.admin
    owner = pair.admin.call(
        pair.admin.core.create_namespaced_config_map,
        ns,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "isvc-stand-in"}},
        what="owner",
        mutating=True,
    )
    body = deployment("owned", "owned", replicas=1)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",  # KServe's InferenceService, Dynamo, Seldon … in real life
            "name": "isvc-stand-in",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    create(pair, ns, body)
    view = pair.core.get_deploy("owned")
    assert view.kind is DeployKind.OTHER  # the engine's eligibility says unsupported_kind
    with pytest.raises(Unsupported) as refused:
        pair.core.stop("owned", etag=view.etag, allow_aliased_downtime=False, idempotency_key="k")
    assert refused.value.reason == "unsupported_kind"
    assert "ConfigMap/isvc-stand-in" in str(refused.value)
    assert read_deployment(pair, ns, "owned")["spec"]["replicas"] == 1


def test_a_duplicated_deploy_id_does_not_break_the_batched_read_of_the_pass(pair: Pool) -> None:
    ns = pair.cluster.layout.admin
    create(pair, ns, deployment("dup-1", "dup"))
    create(pair, ns, deployment("dup-2", "dup"))
    views_ = pair.core.get_deploys(["b", "c", "dup"])
    assert set(views_) == {"b", "c"}  # the others of the pass are read
    with pytest.raises(Permanent) as dup:
        pair.core.get_deploy("dup")
    assert dup.value.reason == "duplicate_deploy_id"
