"""``views.crash_loop`` and the ``DeployView`` it feeds, from pod objects as the kubelet writes
them (no cluster). Mutations caught: a crash loop read from a running container or from a pod
already going, the restart count or exit code lost, a stopped workload reporting its old pods'
loop. The engine's use of it runs on the real node
(``tests/k8s/test_real_node.py::test_a_server_that_crash_loops_after_ready_ends_crash_loop``).
"""

from __future__ import annotations

from typing import Any

from gps_dagster.backends.k8s import names, views
from gps_dagster.backends.k8s.workloads import from_object


def pod(name: str, *, reason: str | None, restarts: int, deleting: bool = False) -> dict[str, Any]:
    state = (
        {"waiting": {"reason": reason, "message": "back-off 20s restarting failed container"}}
        if reason
        else {"running": {"startedAt": "2026-10-19T08:00:00Z"}}
    )
    meta: dict[str, Any] = {"name": name, "namespace": "serving", "labels": {"app": "m"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-10-19T08:01:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"name": "server"}]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "server", "ready": False, "restartCount": restarts, "state": state,
            "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]},
    }  # fmt: skip


def workload(replicas: int) -> Any:
    return from_object("Deployment", {
        "metadata": {"name": "m", "namespace": "serving", "uid": "u", "resourceVersion": "1",
                     "generation": 1, "labels": {names.DEPLOY_ID: "m"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "m"}},
                 "template": {"spec": {}}},
        "status": {"observedGeneration": 1, "readyReplicas": 0},
    })  # fmt: skip


def test_the_most_restarted_container_in_back_off_is_reported_with_its_exit_code() -> None:
    own = [
        pod("m-a", reason="CrashLoopBackOff", restarts=2),
        pod("m-b", reason="CrashLoopBackOff", restarts=4),
    ]
    restarts, words = views.crash_loop(own)
    assert restarts == 4
    assert (
        words
        == "pod m-b container server: CrashLoopBackOff after 4 restart(s), last exit code 3 (Error)"
    )


def test_running_containers_other_waits_and_deleting_pods_are_no_crash_loop() -> None:
    own = [
        pod("m-a", reason=None, restarts=5),  # restarted, running again
        pod("m-b", reason="ContainerCreating", restarts=0),
        pod(
            "m-c", reason="CrashLoopBackOff", restarts=9, deleting=True
        ),  # going: not the deploy's now
    ]
    assert views.crash_loop(own) == (0, None)


def test_the_view_carries_it_while_running_and_not_once_stopped() -> None:
    own = [pod("m-a", reason="CrashLoopBackOff", restarts=3)]
    view = views.deploy_view(workload(1), own, aliases=(), hpa=False, binding=None)
    assert (
        view.restarts == 3 and view.crash_loop is not None and "CrashLoopBackOff" in view.crash_loop
    )
    stopped = views.deploy_view(workload(0), own, aliases=(), hpa=False, binding=None)
    assert (stopped.restarts, stopped.crash_loop) == (0, None)
