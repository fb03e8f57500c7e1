"""The real engine drives the real API server (SPEC §1, §6, §7 on Kubernetes).

Every test builds its pool on the control plane of ``make test`` (fake GPU nodes, real
Deployments, the real scheduler and controllers), runs the real ``EngineLoop`` on its own thread
(``tests/k8s/world.py``: no ``settle()``, the cluster moves while passes run) on a virtual clock
and asserts on what the *cluster* shows: pods, GPUs per node, the workloads' operation ledgers.
``K8sWorld.check`` runs at every round of the fakes and fails the test on any overcommit.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from gps_dagster.backends.k8s import names, pods
from gps_dagster.domain.pool import gpu_uuid
from gps_dagster.engine import EngineConfig
from gps_dagster.ports import DeployState, QuotaRefused
from tests.engine.harness import (
    SEED_MONDAY,
    A,
    B,
    C,
    a_running_pool,
    cmp_pool,
    cmp_schedule,
    example,
    local,
    seed_pool,
    seed_schedule,
)
from tests.k8s.world import K8sWorld

EVENING = local("2026-10-19T17:59:30")
MORNING = local("2026-10-19T07:59:30")
Q = "md-qwen-8gpu"


def c_pod_uids(w: K8sWorld) -> set[str]:
    _, ns, _ = w.cluster.workloads[C]
    found = w.cluster.kube.items(
        w.cluster.kube.core.list_namespaced_pod,
        ns,
        label_selector=f"{names.DEPLOY_ID}={C}",
        what="C pods",
    )
    return {p["metadata"]["uid"] for p in found if not pods.deleting(p)}


def test_the_seed_week_swaps_a_and_b_release_first_with_c_untouched(new_world: Any) -> None:
    # the due index wakes the loop at every boundary and follow-up: the interval is a safety net
    w = new_world(
        schedule=seed_schedule(),
        pool=seed_pool(),
        start=SEED_MONDAY,
        config=EngineConfig(pass_interval_s=3600),
        max_step_s=None,
    )
    c_before = c_pod_uids(w)
    w.drive(SEED_MONDAY + timedelta(days=7))
    swaps = [t for t in w.store.list_transitions() if w.store.list_actions(transition_id=t.id)]
    boundaries = [t.boundary_at.astimezone(SEED_MONDAY.tzinfo).strftime("%a %H:%M") for t in swaps]
    assert boundaries == [
        "Mon 08:00",
        "Mon 18:00",
        "Tue 08:00",
        "Tue 18:00",
        "Wed 08:00",
        "Wed 13:00",
        "Wed 15:00",
        "Wed 18:00",
        "Thu 08:00",
        "Thu 18:00",
        "Fri 08:00",
        "Fri 18:00",
    ]
    for t in swaps:
        steps = w.store.list_actions(transition_id=t.id)
        release = [s for s in steps if s.order == "release"]
        acquire = [s for s in steps if s.order == "acquire"]
        assert [s.step for s in release] == ["stop"] and [s.step for s in acquire] == ["start"]
        assert {s.state for s in steps} == {"converged"}
        # release first: the start reached the API server only once the stop had converged
        assert release[0].finished_at is not None and acquire[0].submitted_at is not None
        assert acquire[0].submitted_at >= release[0].finished_at
    kinds = [(d, k) for d, k, _ in w.operations()]
    assert kinds.count((A, "stop")) == kinds.count((A, "start")) == 6
    assert kinds.count((B, "stop")) == kinds.count((B, "start")) == 6
    keys = [key for _, _, key in w.operations()]
    assert len(keys) == len(set(keys))  # each step mutated the cluster exactly once
    assert w.operations(C) == [] and c_pod_uids(w) == c_before  # C: never touched, never restarted
    assert all(sum(s.by_node[n].get(C, 0) for n in s.by_node) == 2 for s in w.samples)
    assert max(sum(sum(h.values()) for h in s.by_node.values()) for s in w.samples) == 10
    assert any(s.by_node and sum(h.get(A, 0) for h in s.by_node.values()) == 8 for s in w.samples)
    assert {w.status(t).phase for t in (A, B)} == {"converged"}


def test_scenario2_scales_a_down_and_starts_qwen_on_the_node_a_freed(new_world: Any) -> None:
    w = new_world(
        schedule=example("scenario2-schedule.json"),
        pool=example("seed-pool-16.yaml"),
        start=MORNING,
    )
    (node_a,), (node_q,) = w.nodes_of(A), w.nodes_of(Q)  # where the scheduler put them at load
    assert node_a != node_q
    w.run_until(local("2026-10-19T08:06"))
    assert w.nodes_of(A) == {node_a, node_q} and w.nodes_of(Q) == set()
    w.advance_to(EVENING)
    w.run_until(local("2026-10-19T18:06"))
    assert w.nodes_of(A) == {node_a} and w.nodes_of(Q) == {node_q}
    assert all(
        sum(h.get(A, 0) for h in s.by_node.values()) >= 8 for s in w.samples
    )  # A never lost its replica
    assert [(d, k) for d, k, _ in w.operations()] == [
        (Q, "stop"),
        (A, "set_replica_intent"),
        (A, "set_replica_intent"),
        (Q, "start"),
    ]
    a = w.deploy(A)
    assert (a.state, a.ready_replicas, a.desired_replicas, a.role_min, a.role_max) == (
        DeployState.READY,
        1,
        1,
        1,
        1,
    )
    assert w.status(A).phase == "converged" and w.status(Q).phase == "converged"
    reduced = [e for e in w.store.list_events(limit=1000) if e.kind == "capacity_reduced"]
    assert [(e.deploy_id, e.at) for e in reduced] == [(A, local("2026-10-19T18:00"))]


def test_alias_blocked_keeps_a_serving_and_b_stopped(new_world: Any) -> None:
    doc = seed_schedule()
    doc["targets"][0]["default_allow_downtime"] = False
    w = new_world(schedule=doc, pool=a_running_pool(), start=EVENING)
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("alias_blocked", "alias_without_consent") and "chat-prod" in (
        st.fix or ""
    )
    assert w.status(B).phase == "alias_blocked"
    assert w.deploy(A).state is DeployState.READY and w.deploy(B).state is DeployState.STOPPED
    assert w.operations() == []


def test_an_alias_service_blocks_the_stop_too(new_world: Any) -> None:
    """The alias guard also reads Services labelled ``gps.dagster.io/alias-of``."""
    doc = seed_schedule()
    doc["targets"][1]["default_allow_downtime"] = False
    pool = seed_pool()  # morning: B (no alias annotation) runs and is stopped at 08:00
    w = new_world(schedule=doc, pool=pool, start=MORNING)
    _, ns, _ = w.cluster.workloads[B]
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "batch-api", "labels": {names.ALIAS_OF: B}},
        "spec": {"ports": [{"port": 80}], "selector": {names.DEPLOY_ID: B}},
    }
    w.cluster.kube.call(
        w.cluster.kube.core.create_namespaced_service, ns, svc, what="svc", mutating=True
    )
    w.run_until(local("2026-10-19T08:05"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("alias_blocked", "alias_without_consent") and "batch-api" in (
        st.fix or ""
    )
    assert w.deploy(B).state is DeployState.READY and w.operations() == []


def test_quota_refused_by_the_namespace_resourcequota_stops_nothing(new_world: Any) -> None:
    """Quota 7 admits B (6) but not A (8) even after B's release: B is not stopped for nothing."""
    w = new_world(schedule=cmp_schedule(), pool=cmp_pool(quota=7, a_running=False), start=MORNING)
    w.run_until(local("2026-10-19T08:05"))
    st = w.status(A)
    assert (st.phase, st.reason) == ("quota_refused", "quota_refused")
    assert "ResourceQuota" in (st.fix or "") or "quota 7" in (st.fix or "")
    assert (st.detail or {}).get("quota") == 7
    assert w.status(B).phase == "quota_refused" and f"{A} failed preflight" in (
        w.status(B).fix or ""
    )
    assert w.deploy(B).state is DeployState.READY
    assert w.operations() == []


def test_billing_refused_by_the_namespace_mark_stops_nothing(new_world: Any) -> None:
    w = new_world(schedule=cmp_schedule(), pool=cmp_pool(billing="unpaid"), start=EVENING)
    w.run_until(local("2026-10-19T18:05"))
    assert (w.status(B).phase, w.status(B).reason) == ("billing_refused", "billing_refused")
    assert w.deploy(A).state is DeployState.READY and w.operations() == []


def test_capacity_taken_by_a_foreign_pod_ends_capacity_unavailable(new_world: Any) -> None:
    """Pending foreign 1-GPU pods are in the scheduler's queue before B's start exists: the GPUs
    A frees are theirs (PrioritySort), so B waits and ends capacity_unavailable. Found by the
    engine running on its own loop while the cluster moves: the preview used to count the GPUs
    free in the instant before the scheduler bound the intruders, and B raced them."""
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=EVENING,
        config=EngineConfig(capacity_wait_s=300),
    )
    w.cluster.add_foreign(
        "intruder", 8, "intruder"
    )  # pending 1-GPU pods: they grab what is published
    w.until_quiet_wall(lambda: _judged_pending(w, "foreign-intruder") == 8, "intruders pending")
    # The wait begins when the pass that released A sees B's GPUs taken: at or after 18:00, by
    # how long the moving cluster takes. So the instants are bounds around the wait's own start,
    # not fixed minutes (the run of 2feabdd saw a fixed 18:05 check race the wait's deadline).
    w.run_until(local("2026-10-19T18:04"))
    waiting = w.status(B)
    assert waiting.phase == "capacity_wait"  # mutation: B started into the queue → starting
    began = waiting.phase_since
    assert local("2026-10-19T18:00") <= began <= local("2026-10-19T18:04")
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("capacity_unavailable", "capacity_unavailable")
    # Ends by the wait's clock (capacity_wait_s=300), not earlier, and within one step after it.
    assert began + timedelta(seconds=300) <= st.phase_since <= began + timedelta(seconds=330)
    assert w.deploy(B).state is DeployState.STOPPED and w.deploy(A).state is DeployState.STOPPED
    held = {h: n for s in w.samples[-1:] for node in s.by_node.values() for h, n in node.items()}
    assert sum(n for h, n in held.items() if h.startswith("foreign-intruder")) == 8
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop")]  # A is not restarted


def _cpu_hungry(w: K8sWorld, deploy: str) -> None:
    """More CPU than any node has: the GPU preview fits, the scheduler still says Unschedulable."""
    _, ns, name = w.cluster.workloads[deploy]
    patch: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            **w.cluster.template(w.pool_spec.deploy(deploy))["spec"]["containers"][
                                0
                            ],  # type: ignore[arg-type]
                            "resources": {
                                "requests": {"cpu": "1000", names.GPU: "6"},
                                "limits": {names.GPU: "6"},
                            },
                        }
                    ]
                }
            }
        }
    }
    w.cluster.kube.merge_patch(
        w.cluster.kube.apps.patch_namespaced_deployment, name, ns, body=patch, what="cpu"
    )


def test_a_start_the_scheduler_would_refuse_is_judged_before_anything_is_released(
    new_world: Any,
) -> None:
    """Issue 18 item 9: B asks for more CPU than any node has. The preview used to count GPUs
    only, said Fits once A was released, and B's pods waited Pending to start_unschedulable; now
    the preview says no and B is never started (capacity_wait, then capacity_unavailable)."""
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=EVENING,
        config=EngineConfig(unschedulable_grace_s=120),
    )
    _cpu_hungry(w, B)
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert st.phase in ("capacity_wait", "capacity_unavailable")
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop")]  # B's pods never created
    assert not w.deploy(B).unschedulable


def test_start_unschedulable_is_the_schedulers_verdict_and_keeps_the_allocation(
    new_world: Any,
) -> None:
    """The cluster moves between the preflight and the placement (another tenant's pod is bound
    to the nodes while B's start is being written): the scheduler's verdict still ends it."""
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=EVENING,
        config=EngineConfig(unschedulable_grace_s=120),
    )
    _before_start_patch(w, B, lambda: _bind_cpu_hogs(w))
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("start_unschedulable", "start_unschedulable")
    assert (st.detail or {}).get("allocation_kept") is True
    b = w.deploy(B)
    assert (
        b.unschedulable and b.state is DeployState.STARTING
    )  # kept: nothing stopped automatically
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]


def test_a_pod_the_api_server_refuses_ends_start_refused_at_once_not_at_the_deadline(
    new_world: Any,
) -> None:
    """Issue 18 item 11: a LimitRange (or a cpu/pod quota, Pod Security, a webhook) refuses B's
    pods after every preflight passed: the ReplicaSet's FailedCreate is the verdict, within a
    pass or two, instead of B sitting at 0 pods until readiness_timeout (30 min)."""
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    _, ns, _ = w.cluster.workloads[B]
    body = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "cpu-floor"},
        "spec": {"limits": [{"type": "Container", "min": {"cpu": "20m"}}]},
    }
    w.cluster.kube.call(
        w.cluster.kube.core.create_namespaced_limit_range, ns, body, what="lr", mutating=True
    )
    w.run_until(local("2026-10-19T18:04"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("start_refused", "start_refused")
    assert "minimum cpu usage per Container" in (st.fix or "")
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]


def test_admin_deploys_sharing_a_namespace_quota_equal_to_the_pool_can_swap(
    new_world: Any,
) -> None:
    """Issue 18 item 6: a ResourceQuota is per namespace. A (8) and C (2) hold the whole 10-GPU
    quota of the admin namespace; A's release makes room for B (6) under that same quota. The
    preflight used to credit releases per project label (none here): B was quota_refused."""
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    _, ns, _ = w.cluster.workloads[B]
    kube = w.cluster.kube
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus"},
        "spec": {"hard": {f"requests.{names.GPU}": "10"}},
    }
    kube.call(kube.core.create_namespaced_resource_quota, ns, body, what="quota", mutating=True)
    for _ in range(100):  # the quota controller counts the running pods (wall time)
        q = kube.call(kube.core.read_namespaced_resource_quota, "gpus", ns, what="quota")
        if ((q.get("status") or {}).get("used") or {}).get(f"requests.{names.GPU}") == "10":
            break
        time.sleep(0.1)
    else:
        raise AssertionError("quota usage never counted")
    w.run_until(local("2026-10-19T18:10"))
    assert w.status(B).phase == "converged", (w.status(B).phase, w.status(B).fix)
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]


def test_one_project_across_two_namespaces_is_not_credited_across_their_quotas(
    new_world: Any,
) -> None:
    """Issue 18 item 6: one project (``chat``) spread over two namespaces. A (8 GPUs) runs in the
    first, under its own ResourceQuota; B (6) is in the second, whose quota is 5. A
    ResourceQuota is per namespace ("ResourceQuota sets aggregate quota restrictions enforced
    per namespace": the ResourceQuota API type's description, kubernetes.io
    /docs/concepts/policy/resource-quotas "aggregate resource consumption per namespace"), so
    stopping A frees nothing under B's quota: the preflight refuses B before anything moves and A
    keeps serving (R-PASS-6). Crediting A's release per project label made the plan pass, stop A,
    and then B was refused by its own namespace's quota.

    Mutation caught: ``QuotaLedger.charge`` crediting ``freed`` by project (``self.freed``) instead
    of only under the same quota scope (``_freed_in``) — A gets stopped for nothing."""
    pool = cmp_pool(quota=8)  # A's namespace: quota 8, exactly what A holds
    pool["deploys"][1]["project"] = "chat-west"  # lays B out in a second namespace ...
    pool["projects"]["chat-west"] = {"gpu_quota": 5, "billing": "ok"}
    w = new_world(schedule=cmp_schedule(), pool=pool, start=EVENING)  # the loop starts below
    (_, ns_a, _), (_, ns_b, name_b) = w.cluster.workloads[A], w.cluster.workloads[B]
    assert ns_a != ns_b
    kube = w.cluster.kube
    kube.merge_patch(  # ... whose project label is chat, as A's: one project, two namespaces
        kube.apps.patch_namespaced_deployment,
        name_b,
        ns_b,
        body={"metadata": {"labels": {names.PROJECT: "chat"}}},
        what="relabel B",
    )
    assert w.deploy(B).project == w.deploy(A).project == "chat"
    assert w.core.check_quota(A, delta_replicas=0).scope == f"{ns_a}/gpu-quota"  # two quotas,
    with pytest.raises(QuotaRefused) as over:  # one project
        w.core.check_quota(B, delta_replicas=1)
    assert over.value.scope == f"{ns_b}/gpu-quota"
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("quota_refused", "quota_refused"), (st.phase, st.fix)
    assert f"{ns_b}/gpu-quota" in (st.fix or "")  # the quota of B's namespace, by name
    assert (st.detail or {}).get("quota") == 5
    assert w.status(A).phase == "quota_refused" and f"{B} failed preflight" in (
        w.status(A).fix or ""
    )
    assert w.deploy(A).state is DeployState.READY
    assert w.operations() == []  # A was not stopped for nothing


def _fake_cluster_autoscaler(w: K8sWorld, deploy: str, reason: str) -> None:
    """A FAKE cluster-autoscaler (none can run here: there is no cloud to add nodes from): at each
    round of the fakes it records, like the real one, a Normal event ``reason`` on every
    unschedulable pod of ``deploy`` it has not spoken about yet."""
    kube, ns = w.cluster.kube, w.cluster.workloads[deploy][1]
    told: set[str] = set()

    def speak() -> None:
        found = kube.items(
            kube.core.list_namespaced_pod,
            ns,
            label_selector=f"{names.DEPLOY_ID}={deploy}",
            what="p",
        )
        for p in found:
            if pods.unschedulable(p) and pods.name(p) not in told:
                told.add(pods.name(p))
                message = (
                    "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]"
                    if reason == "TriggeredScaleUp"
                    else "pod didn't trigger scale-up: 1 max node group size reached"
                )
                body = {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{pods.name(p)}.ca"},
                    "involvedObject": {"kind": "Pod", "namespace": ns, "name": pods.name(p)},
                    "reason": reason,
                    "message": message,
                    "type": "Normal",
                    "source": {"component": "cluster-autoscaler"},
                    "lastTimestamp": w.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
                kube.call(kube.core.create_namespaced_event, ns, body, what="ev", mutating=True)

    w.extra_steps.append(speak)


@pytest.mark.parametrize(
    ("reason", "phase"),
    [
        ("NotTriggerScaleUp", "start_unschedulable"),  # no node group fits: no point waiting
        ("TriggeredScaleUp", "awaiting_ready"),  # its node is coming: the readiness deadline rules
    ],
)
def test_not_trigger_scale_up_is_unschedulable_at_once_and_triggered_waits_for_its_node(
    new_world: Any, reason: str, phase: str
) -> None:
    """Issue 18 item 10: with a cluster-autoscaler a GPU node takes minutes. A pod it will add a
    node for (TriggeredScaleUp) waits to the readiness deadline, not the unschedulable grace; a
    pod no node group can fit (NotTriggerScaleUp) is start_unschedulable without waiting."""
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=EVENING,
        config=EngineConfig(unschedulable_grace_s=600 if reason == "NotTriggerScaleUp" else 120),
    )
    _before_start_patch(w, B, lambda: _bind_cpu_hogs(w))
    _fake_cluster_autoscaler(w, B, reason)
    w.run_until(local("2026-10-19T18:08"))  # far past 120 s of grace, before 600 s
    assert w.status(B).phase == phase
    assert w.deploy(B).unschedulable


def _judged_pending(w: K8sWorld, prefix: str) -> int:
    """Pods named ``prefix``* the scheduler has judged Unschedulable."""
    found = w.cluster.kube.items(
        w.cluster.kube.core.list_namespaced_pod, w.cluster.layout.admin, what="pending pods"
    )
    return sum(1 for p in found if pods.name(p).startswith(prefix) and pods.unschedulable(p))


def _before_start_patch(w: K8sWorld, deploy: str, action: Any) -> None:
    """Run ``action`` once, after the preflight, just before the adapter PATCHes ``deploy``."""
    _, _, name = w.cluster.workloads[deploy]
    rest = w.core.kube.api_client.rest_client
    inner = rest.request
    fired: list[bool] = []

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PATCH" and url.split("?")[0].endswith(f"/deployments/{name}") and not fired:
            fired.append(True)
            action()
        return inner(method, url, *args, **kwargs)

    rest.request = request


def _bind_cpu_hogs(w: K8sWorld) -> None:
    """Another tenant's pod bound straight to every node (``nodeName``: no scheduler involved),
    taking all the CPU but 5m (B's pods ask 10m each)."""
    kube = w.cluster.kube
    bound = pods.holding(
        kube.items(
            kube.core.list_pod_for_all_namespaces, field_selector="spec.nodeName!=", what="p"
        )
    )
    for i, node in enumerate(sorted(w.cluster.sim.nodes)):
        obj = kube.call(kube.core.read_node, node, what="node")
        used = sum(
            pods.spec_requests(p["spec"]).get("cpu", 0) for p in bound if pods.node(p) == node
        )
        free_m = int((pods.parse_quantity(obj["status"]["allocatable"]["cpu"]) - used) * 1000)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"cpu-hog-{i}"},
            "spec": {
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "hog",
                        "image": "hog:1",
                        "resources": {"requests": {"cpu": f"{free_m - 5}m"}},
                    }
                ],
            },
        }
        w.cluster.kube.call(
            w.cluster.kube.core.create_namespaced_pod,
            w.cluster.layout.system,
            body,
            what="bind a cpu hog",
            mutating=True,
        )


def _reserved_pool() -> dict[str, Any]:
    """One 12-GPU node; B binds exclusive{4} to GPUs 0-3, A (unbound) runs on 4-7, 8-11 are free."""
    name = "rsv-swap"
    return {
        "name": name,
        "nodes": [{"name": "n1", "gpus": 12}],
        "reservations": [
            {
                "id": "rsv-b",
                "node": "n1",
                "namespace": "serving",
                "mode": "exclusive",
                "gpu_memory_mib": 81559,
                "gpu_uuids": [gpu_uuid(name, "n1", i) for i in range(4)],
            }
        ],
        "deploys": [
            {"id": A, "gpus_per_replica": 4, "state": "running", "aliases": ["chat-prod"]},
            {
                "id": B,
                "gpus_per_replica": 4,
                "reservation": {"mode": "exclusive", "reservations": ["rsv-b"]},
            },
        ],
        "sim": {"timings": {"stop_grace_s": 30, "publish_lag_s": 0, "start_delay_s": 120}},
    }


def test_a_bound_deploy_is_witnessed_on_its_reservation(new_world: Any) -> None:
    w = new_world(schedule=seed_schedule(), pool=_reserved_pool(), start=EVENING)
    w.run_until(local("2026-10-19T18:06"))
    assert w.status(B).phase == "converged"
    reserved = {gpu_uuid("rsv-swap", "n1", i) for i in range(4)}
    assert set(w.core.witness(B).uuids) == reserved


def test_placement_mismatch_when_the_device_plugin_hands_out_other_gpus(new_world: Any) -> None:
    w = new_world(schedule=seed_schedule(), pool=_reserved_pool(), start=EVENING)
    w.cluster.sim.misplace.add(B)
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert st.phase == "placement_mismatch"
    assert "outside reservation" in (st.fix or "") and "no automatic repair" in (st.fix or "")
    outside = set((st.detail or {}).get("outside", []))
    assert outside and not outside & {gpu_uuid("rsv-swap", "n1", i) for i in range(4)}
    assert w.deploy(B).state is DeployState.READY  # kept running: moving it is an operator's call
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]
