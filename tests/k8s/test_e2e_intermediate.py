"""The engine's own loop meets the cluster half-way (what ``settle()`` before each pass hid).

End to end (``tests/k8s/world.py``): the real ``EngineLoop`` on its own thread, the fakes and the
real controllers moving the pods at the same time, the test only changing the world and waiting.
Each test records what the cluster looked like when a pass ended, and asserts both that the loop
really met the intermediate state and what the product did about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.engine import PassReport
from tests.engine.harness import A, B, a_running_pool, local, seed_schedule
from tests.k8s.world import K8sWorld

EVENING = local("2026-10-19T17:59:30")
GRACE_END = local("2026-10-19T18:00:30")
"""A's stop is accepted at 18:00: its pods' 30 s of grace end then."""


@dataclass(frozen=True)
class Seen:
    at: datetime
    status_replicas: int
    """What A's Deployment status says (the controller's count: terminating pods excluded)."""
    terminating: int
    """A's pods still bound with a deletion timestamp (their GPUs are still held)."""
    b_started: bool
    """B's start had reached the API server by the end of this pass."""


def own_pods(w: K8sWorld, deploy: str) -> list[dict[str, Any]]:
    _, ns, _ = w.cluster.workloads[deploy]
    return w.cluster.kube.items(
        w.cluster.kube.core.list_namespaced_pod,
        ns,
        label_selector=f"{names.DEPLOY_ID}={deploy}",
        what=f"{deploy} pods",
    )


def deployment_replicas(w: K8sWorld, deploy: str) -> int:
    """What the deploy's Deployment status counts (the controllers' view, Terminating pods out)."""
    _, ns, name = w.cluster.workloads[deploy]
    kube = w.cluster.kube
    dep = kube.call(kube.apps.read_namespaced_deployment, name, ns, what=deploy)
    return int((dep.get("status") or {}).get("replicas") or 0)


def b_start_state(w: K8sWorld) -> str | None:
    """The state of B's start step (None before the 18:00 plan opened)."""
    found = [s.state for s in w.store.list_actions(deploy_id=B) if s.step == "start"]
    return found[-1] if found else None


def record_passes(w: K8sWorld) -> list[Seen]:
    """After every pass of the loop (on its thread): A's Deployment status and pods, B's start."""
    seen: list[Seen] = []
    inner = w.loop.on_pass

    def look(report: PassReport) -> None:
        if inner is not None:
            inner(report)
        going = [p for p in own_pods(w, A) if pods.deleting(p) and pods.node(p)]
        started = any(
            s.step == "start" and s.submitted_at is not None
            for s in w.store.list_actions(deploy_id=B)
        )
        seen.append(Seen(w.clock.now(), deployment_replicas(w, A), len(going), started))

    w.loop.on_pass = look
    return seen


def test_the_loop_meets_the_released_pods_terminating_and_starts_b_only_once_they_are_gone(
    new_world: Any,
) -> None:
    """A's stop is accepted at 18:00; for its 30 s of grace A's pods are Terminating while its
    Deployment already reports 0 replicas (the ReplicaSet controller does not count pods being
    deleted). Passes run all along; B's start (6 GPUs on the node A holds 8 of) must wait for
    the pods to be gone, not for the status to say 0."""
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    seen = record_passes(w)
    w.wait_for(
        lambda: any(s.terminating for s in seen), "a pass met A's pods Terminating", by=GRACE_END
    )
    # The ReplicaSet and Deployment controllers count the Terminating pods out in wall time (their
    # resync cannot follow the virtual clock); on a loaded machine the 30 virtual seconds of grace
    # passed before they had. Hold the clock until they have: the grace is still running, so the
    # passes after this meet the state the test is about (status 0, the GPUs still held).
    w.until_quiet_wall(lambda: deployment_replicas(w, A) == 0, "A's Deployment reporting 0")
    w.wait_for(
        lambda: b_start_state(w) == "converged", "B's start converged", by=local("2026-10-19T18:08")
    )
    halfway = [s for s in seen if s.status_replicas == 0 and s.terminating]
    assert halfway, f"no pass met A's pods terminating: {seen}"
    assert not any(s.b_started for s in halfway), "B started while A's pods held the GPUs"
    gone = min(s.at for s in seen if s.at > halfway[-1].at)
    (start,) = [s for s in w.store.list_actions(deploy_id=B) if s.step == "start"]
    assert start.submitted_at is not None and start.submitted_at >= gone
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]


def test_a_pod_deleted_under_a_starting_deploy_is_waited_for_not_failed_or_restarted(
    new_world: Any,
) -> None:
    """While B's pod is bound but not Ready yet (120 s of start), someone deletes it (an
    eviction, a drain). The ReplicaSet controller makes another; passes meet B with no pod, then
    a Pending one. The start is one operation and converges once the replacement is Ready."""
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    w.wait_for(
        lambda: any(pods.node(p) and not pods.deleting(p) for p in own_pods(w, B)),
        "B's pod bound",
        by=local("2026-10-19T18:05"),
    )
    (first,) = [p for p in own_pods(w, B) if not pods.deleting(p)]
    assert not pods.ready(first)
    _, ns, _ = w.cluster.workloads[B]
    w.cluster.kube.call(
        w.cluster.kube.core.delete_namespaced_pod,
        pods.name(first),
        ns,
        what="evict B's pod",
        mutating=True,
    )
    deleted_at = w.clock.now()
    done = w.wait_for(
        lambda: b_start_state(w) in ("converged", "failed"),
        "B's start decided",
        by=local("2026-10-19T18:15"),
    )
    assert w.status(B).phase == "converged", (w.status(B).phase, w.status(B).fix)
    live = [p for p in own_pods(w, B) if not pods.deleting(p)]
    assert [pods.name(p) for p in live] != [pods.name(first)] and all(pods.ready(p) for p in live)
    assert (done - deleted_at).total_seconds() >= 120  # the replacement's own start, waited for
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]
