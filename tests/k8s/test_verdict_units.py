"""Issue 18's verdicts on plain objects (no cluster): the shapes real controllers write, and what
the capacity preview must model before it may say Fits."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from gps_dagster.backends.k8s import accounts, capacity, names, pods, views
from gps_dagster.backends.k8s.mutations import leader_template, start
from gps_dagster.backends.k8s.workloads import LWS, from_object
from gps_dagster.ports import Fits, Insufficient, Permanent


def lws(status: dict[str, Any], *, replicas: int = 2, generation: int = 4) -> Any:
    worker = {"spec": {"containers": [{"name": "w", "resources": {"limits": {names.GPU: "8"}}}]}}
    leader = {"spec": {"containers": [{"name": "l", "resources": {}}]}}
    return from_object(
        LWS,
        {
            "metadata": {
                "name": "big",
                "namespace": "ns",
                "uid": "u" * 16,
                "generation": generation,
                "labels": {names.DEPLOY_ID: "big"},
            },
            "spec": {
                "replicas": replicas,
                "leaderWorkerTemplate": {
                    "size": 2,
                    "workerTemplate": worker,
                    "leaderTemplate": leader,
                },
            },
            "status": status,
        },
    )


V08_READY = {
    "replicas": 2,
    "updatedReplicas": 2,
    "readyReplicas": 2,
    "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady"}],
}


def test_lws_v08_status_without_observed_generation_is_current_when_counts_match() -> None:
    assert views.observed_generation(lws(V08_READY)) == 4
    assert views.derive_state(lws(V08_READY), [], 2) is not views.DeployState.STARTING


@pytest.mark.parametrize(
    "status",
    [
        {**V08_READY, "replicas": 1, "updatedReplicas": 1},  # scaled up, not yet acted on
        {**V08_READY, "conditions": [{"type": "UpdateInProgress", "status": "True"}]},
    ],
)
def test_lws_v08_status_is_behind_until_the_controller_catches_up(status: dict[str, Any]) -> None:
    assert views.observed_generation(lws(status)) == 3


def test_lws_v09_status_observed_generation_wins_over_the_counts() -> None:
    assert views.observed_generation(lws({**V08_READY, "observedGeneration": 3})) == 3
    stamped = [{"type": "Available", "status": "True", "observedGeneration": 4}]
    assert views.observed_generation(lws({**V08_READY, "conditions": stamped})) == 4


def test_an_lws_start_renders_the_leader_template_too() -> None:
    w = lws({}, replicas=0)
    leader = leader_template(w)
    assert leader is not None
    rendered = {**leader, "spec": {**leader["spec"], "schedulerName": "kai-scheduler"}}
    worker = {**w.template, "spec": {**w.template["spec"], "schedulerName": "kai-scheduler"}}
    plan = start(w, template=worker, leader=rendered)
    lwt = plan.spec["leaderWorkerTemplate"]
    assert lwt["leaderTemplate"]["spec"]["schedulerName"] == "kai-scheduler"
    assert lwt["workerTemplate"]["spec"]["schedulerName"] == "kai-scheduler"


# -- items 8, 9, 11: the preview judges as the scheduler does -------------------------------------

GKE_TAINT = {"key": names.GPU, "value": "present", "effect": "NoSchedule"}


def gpu_node(
    name: str,
    gpus: int = 8,
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    taints: list[dict[str, str]] | None = None,
    extra: dict[str, str] | None = None,
) -> Any:
    allocatable = {
        names.GPU: str(gpus),
        "cpu": cpu,
        "memory": memory,
        "pods": "110",
        **(extra or {}),
    }
    return {
        "metadata": {"name": name, "labels": {names.GPU_PRODUCT: "H100"}},
        "spec": {"taints": taints if taints is not None else [GKE_TAINT]},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def template(requests: dict[str, str], **spec: Any) -> dict[str, Any]:
    containers = [{"name": "c", "resources": {"requests": requests, "limits": requests}}]
    return {"metadata": {"labels": {"app": "srv"}}, "spec": {"containers": containers, **spec}}


def bound(
    name: str, node: str, requests: dict[str, str], labels: dict[str, str] | None = None
) -> Any:
    t = template(requests)
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
        "spec": {**t["spec"], "nodeName": node},
        "status": {"phase": "Running"},
    }


def fits(group: list[Any], nodes: list[Any], holding: list[Any] = (), **kw: Any) -> Any:  # type: ignore[assignment]
    return capacity.preview(
        group, namespace="ns", delta=kw.pop("delta", 1), nodes=nodes, holding=list(holding), **kw
    )


def test_a_gpu_pod_fits_a_gke_tainted_gpu_node_through_extended_resource_toleration() -> None:
    assert fits([template({names.GPU: "8"})], [gpu_node("g1")]) == Fits(groups=1)
    cpu_only = template({"cpu": "1"})  # no extended resource: the plugin adds nothing
    assert isinstance(fits([cpu_only], [gpu_node("g1")]), Insufficient)


def test_cpu_memory_and_pod_slots_are_judged_not_only_gpus() -> None:
    nodes = [gpu_node("g1", cpu="8", memory="64Gi")]
    assert isinstance(fits([template({names.GPU: "1", "cpu": "16"})], nodes), Insufficient)
    assert isinstance(fits([template({names.GPU: "1", "memory": "100Gi"})], nodes), Insufficient)
    tenant = bound("other", "g1", {"cpu": "7500m"})  # another tenant's pod loads the node
    assert isinstance(fits([template({names.GPU: "1", "cpu": "1"})], nodes, [tenant]), Insufficient)
    full = gpu_node("g2", extra={"pods": "1"})
    assert isinstance(
        fits([template({names.GPU: "1"})], [full], [bound("p", "g2", {})]), Insufficient
    )


def test_mig_and_other_extended_resources_are_counted() -> None:
    mig = "nvidia.com/mig-1g.10gb"
    nodes = [gpu_node("g1", gpus=0, extra={mig: "7"}, taints=[])]
    assert fits([template({mig: "7"})], nodes) == Fits(groups=1)
    assert fits([template({mig: "2"})], nodes, delta=4).groups_fitting == 3  # type: ignore[union-attr]


def test_an_lws_zero_gpu_leader_and_eight_gpu_worker_are_not_four_plus_four() -> None:
    nodes = [gpu_node("g1", gpus=4), gpu_node("g2", gpus=4)]
    group = [template({"cpu": "1"}), template({names.GPU: "8"})]
    assert isinstance(fits(group, nodes), Insufficient)  # old code: 8 per group / 2 nodes = 4 + 4
    untainted = [gpu_node("g1", gpus=0, taints=[]), gpu_node("g2", gpus=8)]
    assert fits(group, untainted) == Fits(groups=1)  # the 0-GPU leader needs an untainted node


def test_required_anti_affinity_on_hostname_keeps_one_replica_per_node() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "srv"}}, "topologyKey": names.HOSTNAME}
            ]
        }
    }
    t = template({names.GPU: "1"}, affinity=anti)
    assert fits([t], [gpu_node("g1")], delta=2).groups_fitting == 1  # type: ignore[union-attr]
    running = bound("srv-0", "g1", {names.GPU: "1"}, {"app": "srv"})
    assert isinstance(fits([t], [gpu_node("g1")], [running]), Insufficient)


def queued(name: str, requests: dict[str, str], created: str, **spec: Any) -> Any:
    pod = bound(name, "", requests)
    pod["spec"].pop("nodeName")
    pod["spec"].update(spec)
    pod["metadata"]["creationTimestamp"] = created
    pod["status"] = {"phase": "Pending"}
    return pod


def test_pending_pods_ahead_in_the_schedulers_queue_take_freed_gpus_first() -> None:
    """The foreign-intruder race: GPUs just freed by a release go to the pods already waiting
    in kube-scheduler's queue (PrioritySort: priority, then age), not to a start submitted
    after them. Counting only bound pods said Fits and B raced the queue for the GPUs."""
    node = [gpu_node("g1", 8)]
    b = template({names.GPU: "6"})
    waiting = [queued(f"in-{i}", {names.GPU: "1"}, f"2026-10-19T11:00:0{i}Z") for i in range(8)]
    ahead = capacity.queued_ahead(waiting, b["spec"])
    assert [pods.name(p) for p in ahead] == [f"in-{i}" for i in range(8)]
    verdict = fits([b], node, queued=ahead)
    assert isinstance(verdict, Insufficient) and verdict.free_by_node == {}
    assert fits([b], node, queued=ahead[:2]) == Fits(groups=1)  # 2 taken, 6 left
    assert fits([b], node) == Fits(groups=1)  # what the preview said before
    # lower priority waits behind ours (and would be preempted): not ahead
    low = [queued("low", {names.GPU: "8"}, "2026-10-19T10:00:00Z", priority=-5)]
    assert capacity.queued_ahead(low, b["spec"]) == []
    high = {**b["spec"], "priority": 1000}
    assert capacity.queued_ahead(waiting, high) == []
    # a class named without a resolved value: only pods of the same class are known ahead
    klass = {**b["spec"], "priorityClassName": "prod"}
    same = queued("same", {names.GPU: "8"}, "2026-10-19T10:00:00Z", priorityClassName="prod")
    assert [pods.name(p) for p in capacity.queued_ahead([*waiting, same], klass)] == ["same"]
    # bound, nominated, deleting and failed pods are not in the queue
    nominated = {**waiting[0], "status": {"phase": "Pending", "nominatedNodeName": "g1"}}
    gone = {**waiting[1], "metadata": {**waiting[1]["metadata"], "deletionTimestamp": "x"}}
    failed = {**waiting[2], "status": {"phase": "Failed"}}
    assert capacity.queued_ahead([nominated, gone, failed], b["spec"]) == []
    # a queued pod that fits nowhere takes nothing
    huge = [queued("huge", {names.GPU: "16"}, "2026-10-19T10:00:00Z")]
    assert fits([b], node, queued=huge) == Fits(groups=1)


def test_nominated_pods_hold_their_node_and_unmodelled_rules_are_said() -> None:
    preemptor = {
        **bound("hi", "", {names.GPU: "8"}),
        "status": {"phase": "Pending", "nominatedNodeName": "g1"},
    }
    preemptor["spec"].pop("nodeName")
    assert isinstance(
        fits([template({names.GPU: "1"})], [gpu_node("g1")], nominated=[preemptor]), Insufficient
    )
    zone = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ]
        }
    }
    out = fits([template({names.GPU: "1"}, affinity=zone)], [gpu_node("g1")])
    assert isinstance(out, Insufficient) and out.reason == "preview_unsupported:pod_affinity"


def test_sidecars_add_an_empty_node_selector_term_matches_nothing_and_bad_quantities_are_port_errors() -> (  # noqa: E501
    None
):
    sidecar = {
        "name": "proxy",
        "restartPolicy": "Always",
        "resources": {"requests": {names.GPU: "1"}},
    }
    plain_init = {"name": "warm", "resources": {"requests": {names.GPU: "8"}}}
    t = template({names.GPU: "8"}, initContainers=[sidecar])
    assert pods.spec_gpus(t["spec"]) == 9 and isinstance(fits([t], [gpu_node("g1")]), Insufficient)
    assert pods.spec_gpus(template({names.GPU: "1"}, initContainers=[plain_init])["spec"]) == 8
    empty = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}
        }
    }
    assert fits([template({names.GPU: "1"}, affinity=empty)], [gpu_node("g1")]).reason == (  # type: ignore[union-attr]
        "no_matching_flavor"
    )
    with pytest.raises(Permanent) as bad:
        fits([template({names.GPU: "eight"})], [gpu_node("g1")])
    assert bad.value.reason == "invalid_quantity" and "containers[0]" in str(bad.value)
    assert pods.parse_quantity("500m") == Fraction(1, 2) and pods.parse_quantity("1Gi") == 2**30


# -- item 6: a quota's scope is namespace + name + its scopes --------------------------------------


def test_gpu_quotas_name_their_scope_and_skip_quotas_that_do_not_select_the_pod() -> None:
    def quota(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "serving"},
            "spec": {"hard": {accounts.QUOTA_KEY: "8"}, **spec},
            "status": {"used": {accounts.QUOTA_KEY: "2"}},
        }

    high = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    quotas = [
        quota("all"),
        quota("high-only", scopeSelector=high),
        quota("batch", scopes=["Terminating"]),
    ]
    found = accounts.gpu_quotas(quotas, {"priorityClassName": "low"})
    assert found == [("serving/all", 8, 2)]
    both = accounts.gpu_quotas(quotas, {"priorityClassName": "high"})
    assert [s for s, _, _ in both] == ["serving/all", "serving/high-only [PriorityClass In high]"]
