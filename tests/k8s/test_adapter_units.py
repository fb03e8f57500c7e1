"""The Kubernetes adapter's pure parts, on plain objects (no cluster): what a view, a preview,
an ETag and an error mapping say for a given object."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from gps_dagster.backends.k8s import K8sCore, build_core, capacity, ledger, names, views
from gps_dagster.backends.k8s import core as core_mod
from gps_dagster.backends.k8s.api import translate
from gps_dagster.backends.k8s.mutations import merge_diff
from gps_dagster.backends.k8s.workloads import (
    DEPLOYMENT,
    from_object,
    selector_matches,
    selector_string,
)
from gps_dagster.clocks import VirtualClock
from gps_dagster.ports import (
    DeployState,
    EtagMismatch,
    Fits,
    Insufficient,
    NotFound,
    OperationKind,
    Permanent,
    Transient,
)
from tests.k8s.cluster import T0_K8S


def deployment(
    replicas: int = 1,
    *,
    generation: int = 3,
    observed: int = 3,
    ready: int = 1,
    annotations: dict[str, str] | None = None,
) -> Any:
    return from_object(
        DEPLOYMENT,
        {
            "metadata": {
                "name": "b",
                "namespace": "ns",
                "uid": "0123456789abcdef",
                "resourceVersion": "77",
                "generation": generation,
                "labels": {names.DEPLOY_ID: "B"},
                "annotations": annotations or {},
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {names.DEPLOY_ID: "B"}},
                "template": {
                    "spec": {
                        "containers": [{"name": "c", "resources": {"limits": {names.GPU: "6"}}}]
                    }
                },
            },
            "status": {"observedGeneration": observed, "readyReplicas": ready, "replicas": ready},
        },
    )


def pod(
    name: str,
    *,
    node: str | None = "n1",
    gpus: int = 6,
    ready: bool = True,
    deleting: bool = False,
    phase: str = "Running",
    unschedulable: bool = False,
) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conds = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": {names.DEPLOY_ID: "B"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-10-19T10:00:30Z"
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {names.GPU: str(gpus)}}}],
        },
        "status": {"phase": phase, "conditions": conds},
    }


def view(w: Any, own: list[dict[str, Any]]) -> Any:
    return views.deploy_view(w, own, aliases=(), hpa=False, binding=None)


def test_a_scaled_to_zero_deploy_counts_pods_no_controller_deleted_yet_as_terminating() -> None:
    """Right after the scale to 0 the pod still holds its GPUs: not converged, whatever the state"""
    v = view(deployment(0, ready=1), [pod("p1")])
    assert v.state is DeployState.STOPPED and v.terminating_pods == 1 and not v.converged_stopped
    v = view(deployment(0, ready=0), [pod("p1", deleting=True)])
    assert v.terminating_pods == 1 and not v.converged_stopped
    v = view(deployment(0, ready=0), [pod("p1", phase="Succeeded", ready=False)])
    assert v.terminating_pods == 0 and v.converged_stopped  # a terminal pod holds nothing


def test_ready_needs_the_observed_generation_and_no_extra_pod() -> None:
    assert view(deployment(1), [pod("p1")]).state is DeployState.READY
    assert view(deployment(1, observed=2), [pod("p1")]).state is DeployState.UPDATING
    stale = view(deployment(1), [pod("p1"), pod("p2", ready=False)])
    assert stale.state is DeployState.UPDATING and stale.terminating_pods == 1
    assert view(deployment(2, ready=0), [pod("p1", ready=False)]).state is DeployState.STARTING


def test_a_pending_pod_makes_the_applied_generation_lag_and_reports_unschedulable() -> None:
    v = view(deployment(1, ready=0), [pod("p1", node=None, ready=False, unschedulable=True)])
    assert v.unschedulable and v.applied_generation == 2 < v.generation
    assert not view(deployment(1, ready=0), [pod("p1", ready=False)]).unschedulable


def test_a_stopped_deploy_remembers_its_replicas_and_failed_and_deleting_win() -> None:
    assert views.desired_replicas(deployment(0, annotations={names.REPLICAS: "3"})) == 3
    assert views.desired_replicas(deployment(0)) == 1
    w = deployment(1)
    failed = from_object(
        DEPLOYMENT,
        {
            **w.raw,
            "status": {
                "conditions": [
                    {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
                ]
            },
        },
    )
    assert view(failed, []).state is DeployState.FAILED
    gone = from_object(
        DEPLOYMENT, {**w.raw, "metadata": {**w.raw["metadata"], "deletionTimestamp": "x"}}
    )
    assert view(gone, []).state is DeployState.DELETING


def node(
    name: str,
    gpus: int,
    *,
    flavor: str = "H100-80GB",
    ready: bool = True,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {names.GPU_PRODUCT: flavor}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {names.GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def group(spec: dict[str, Any], gpus: int, nodes: int = 1) -> list[dict[str, Any]]:
    """One replica group of ``nodes`` pods of ``spec``, ``gpus`` split evenly among them."""
    per = {names.GPU: str(gpus // nodes)}
    containers = [{"name": "c", "resources": {"requests": per, "limits": per}}]
    return [{"spec": {**spec, "containers": containers}} for _ in range(nodes)]


def test_capacity_fits_whole_groups_per_node_and_counts_terminating_pods() -> None:
    nodes = [node("n1", 8), node("n2", 8), node("a1", 8, flavor="A100")]
    holding = [pod("x", node="n1", gpus=4), pod("y", node="n2", gpus=4, deleting=True)]
    spec = {"nodeSelector": {names.GPU_PRODUCT: "H100-80GB"}}
    out = capacity.preview(group(spec, 8, 1), namespace="ns", delta=1, nodes=nodes, holding=holding)
    assert out == Insufficient("insufficient_capacity", {"n1": 4, "n2": 4}, 1, 0)  # never 4 + 4
    wide = capacity.preview(
        group(spec, 8, 2), namespace="ns", delta=1, nodes=nodes, holding=holding
    )
    assert wide == Fits(groups=1)
    assert (
        capacity.preview(
            group({"nodeSelector": {names.GPU_PRODUCT: "B200"}}, 1, 1),
            namespace="ns",
            delta=1,
            nodes=nodes,
            holding=[],
        ).reason
        == "no_matching_flavor"
    )


def test_capacity_skips_nodes_the_pod_may_not_land_on() -> None:
    tainted = node("t", 8, taints=[{"key": "gpu", "value": "maint", "effect": "NoSchedule"}])
    nodes = [node("down", 8, ready=False), tainted]
    plain = capacity.preview(group({}, 8), namespace="ns", delta=1, nodes=nodes, holding=[])
    assert isinstance(plain, Insufficient)
    tolerant = {
        "tolerations": [
            {"key": "gpu", "operator": "Equal", "value": "maint", "effect": "NoSchedule"}
        ]
    }
    assert capacity.preview(
        group(tolerant, 8, 1), namespace="ns", delta=1, nodes=nodes, holding=[]
    ) == Fits(groups=1)
    pinned = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": names.HOSTNAME, "operator": "In", "values": ["elsewhere"]}
                            ]
                        }
                    ]
                }
            }
        },
        **tolerant,
    }
    assert isinstance(
        capacity.preview(group(pinned, 8, 1), namespace="ns", delta=1, nodes=nodes, holding=[]),
        Insufficient,
    )


def test_the_etag_moves_with_spec_and_ledger_but_not_with_status_or_annotation_writes() -> None:
    w = deployment(1)
    churned = from_object(
        DEPLOYMENT,
        {
            **w.raw,
            "metadata": {**w.raw["metadata"], "resourceVersion": "99"},
            "status": {"readyReplicas": 0},
        },
    )
    assert ledger.etag(w) == ledger.etag(churned)  # a controller's status write is no conflict
    scaled = from_object(DEPLOYMENT, {**w.raw, "spec": {**w.raw["spec"], "replicas": 3}})
    assert ledger.etag(w) != ledger.etag(scaled)  # someone changed what it runs
    annotated = from_object(  # Argo CD's tracking annotation: generation + 1, spec untouched
        DEPLOYMENT,
        {
            **w.raw,
            "metadata": {
                **w.raw["metadata"],
                "generation": 4,
                "annotations": {"argocd.argoproj.io/tracking-id": "app:apps/Deployment:ns/b"},
            },
        },
    )
    assert ledger.etag(w) == ledger.etag(annotated)
    new, entry = ledger.append(
        w,
        ledger.read(w),
        key="k",
        kind=OperationKind.STOP,
        at=T0_K8S,
        spec_changes=True,
        spec_patch={"replicas": 0},
    )
    after = from_object(
        DEPLOYMENT,
        {
            **w.raw,
            "spec": {**w.raw["spec"], "replicas": 0},
            "metadata": {
                **w.raw["metadata"],
                "generation": 4,
                "annotations": {names.OPERATIONS: ledger.dump(new)},
            },
        },
    )
    assert entry.etag_after == ledger.etag(after) and ledger.read(after).by_key("k") == entry


def test_the_ledger_keeps_the_newest_entries_and_ids_round_trip() -> None:
    w, led = deployment(1), ledger.Ledger()
    for i in range(ledger.KEEP + 5):
        led, _ = ledger.append(
            w, led, key=f"k{i}", kind=OperationKind.START, at=T0_K8S, spec_changes=False
        )
    assert (
        len(led.entries) == ledger.KEEP
        and led.by_key("k0") is None
        and led.by_key(f"k{ledger.KEEP + 4}")
    )
    ref = ledger.parse_operation_id(ledger.operation_id(w, 7))
    assert (ref.kind, ref.namespace, ref.name, ref.seq) == (DEPLOYMENT, "ns", "b", 7)
    noop = ledger.parse_operation_id(ledger.noop_id(w, OperationKind.START, "sched/B/2026/start"))
    assert noop.noop == (OperationKind.START, "sched/B/2026/start")
    with pytest.raises(NotFound):
        ledger.parse_operation_id("op-nope")


def _api(status: int, message: str = "boom") -> ApiException:
    exc = ApiException(status=status, reason="r")
    exc.body = json.dumps({"message": message}).encode()
    return exc


@pytest.mark.parametrize(
    ("exc", "kind", "reason"),
    [
        (_api(404), NotFound, "not_found"),
        (_api(409), EtagMismatch, "conflict"),
        (_api(429), Transient, "api_unavailable"),
        (_api(503), Transient, "api_unavailable"),
        (_api(403, "pods is forbidden"), Permanent, "forbidden"),
        (_api(422), Permanent, "invalid"),
        (urllib3.exceptions.NewConnectionError(None, "refused"), Transient, "api_unreachable"),  # type: ignore[arg-type]
    ],
)
def test_api_errors_become_the_ports_typed_errors(
    exc: BaseException, kind: type, reason: str
) -> None:
    err = translate(exc, "patch Deployment/ns/b")
    assert type(err) is kind and err.reason == reason and "patch Deployment/ns/b" in str(err)


def test_a_lost_answer_to_a_mutation_says_it_may_have_been_applied() -> None:
    lost = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
    err = translate(lost, "patch", mutating=True)
    assert isinstance(err, Transient) and err.reason == "response_lost"
    assert translate(lost, "list").reason == "api_unreachable"
    assert "pods is forbidden" in str(
        translate(_api(403, "pods is forbidden"), "x")
    )  # the API's own words


def test_a_broken_kubeconfig_is_a_clear_error(tmp_path: Any) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    with pytest.raises(Permanent) as err:
        build_core(
            ledger=None,
            clock=VirtualClock(T0_K8S),
            kubeconfig=str(bad),
            context=None,
            namespaces=(),
        )
    assert err.value.reason == "kubeconfig_invalid" and "GPS_KUBECONFIG" in str(err.value)


def test_merge_patches_remove_what_the_render_dropped() -> None:
    old = {"spec": {"nodeName": "x", "affinity": {"nodeAffinity": 1}, "containers": [{"a": 1}]}}
    new = {"spec": {"affinity": {}, "containers": [{"a": 2}], "schedulerName": "kai"}}
    assert merge_diff(old, new) == {
        "spec": {
            "nodeName": None,
            "affinity": {"nodeAffinity": None},
            "containers": [{"a": 2}],
            "schedulerName": "kai",
        }
    }


def test_selectors_match_like_the_api_server() -> None:
    sel = {
        "matchLabels": {"a": "1"},
        "matchExpressions": [{"key": "b", "operator": "In", "values": ["x", "y"]}],
    }
    assert selector_string(sel) == "a=1,b in (x,y)"
    assert selector_matches(sel, {"a": "1", "b": "y"}) and not selector_matches(
        sel, {"a": "1", "b": "z"}
    )
    assert not selector_matches({}, {"a": "1"})  # an empty workload selector selects nothing


def test_a_labelled_workload_of_another_kind_is_ineligible_for_the_engine() -> None:
    from gps_dagster.domain.kinds import DeployKind
    from gps_dagster.domain.schedules import load_schedule
    from gps_dagster.engine.eligibility import ineligible_reason
    from tests.engine.harness import seed_schedule

    sts = from_object("StatefulSet", {**deployment(0).raw})
    assert sts.deploy_kind is DeployKind.OTHER
    v = view(sts, [])
    assert ineligible_reason(load_schedule(seed_schedule()), v) == "unsupported_kind"
    job = from_object("Job", {**deployment(0).raw})
    assert job.deploy_kind is DeployKind.BATCH


def test_build_core_reads_the_policy_from_the_given_namespace(tmp_path: Any) -> None:
    """Issue 18 item 13: the chart's rbac.policyNamespace was ignored (always
    gps-dagster-system)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    core = build_core(
        ledger=None,
        clock=VirtualClock(T0_K8S),
        kubeconfig=str(path),
        context=None,
        namespaces=(),
        policy_namespace="gpu-ops",
    )
    assert isinstance(core, K8sCore) and core.gps.policy_namespace == "gpu-ops"
    core.close()
    default = build_core(
        ledger=None,
        clock=VirtualClock(T0_K8S),
        kubeconfig=str(path),
        context=None,
        namespaces=(),
        cache=False,
    )
    assert isinstance(default, K8sCore) and default.gps.policy_namespace == names.POLICY_NAMESPACE
    assert default.cache is None


def _pod(ns: str, name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "labels": labels}}


def test_a_snapshot_selects_a_deploys_pods_from_its_label_index_with_the_full_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutations caught: the views of a batch scanning every pod of the snapshot once per deploy
    (before: 4.4 M selector matches in the 1,000-swap storm, 130 s of its pass), the index
    ignoring the namespace, or a candidate not checked against the whole selector."""
    fleet = [_pod("t1", f"p{i}", app=f"d{i}", tier="serve") for i in range(500)]
    fleet += [_pod("t2", "other-ns", app="d7", tier="serve"), _pod("t1", "x", app="d7")]
    snap = core_mod.Snapshot(pods=fleet)
    checked: list[str] = []
    inner = core_mod.selector_matches

    def counting(selector: Any, labels: Any) -> bool:
        checked.append(labels.get("app", ""))
        return inner(selector, labels)

    monkeypatch.setattr(core_mod, "selector_matches", counting)
    both = {"matchLabels": {"app": "d7", "tier": "serve"}}
    assert [p["metadata"]["name"] for p in snap.selected("t1", both)] == ["p7"]
    assert len(checked) == 2  # p7 and x: the pods of t1 labelled app=d7, not all 502
    exprs = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["d3"]}]}
    assert [p["metadata"]["name"] for p in snap.selected("t1", exprs)] == ["p3"]
    assert snap.selected("t1", {}) == []  # an empty selector selects nothing
