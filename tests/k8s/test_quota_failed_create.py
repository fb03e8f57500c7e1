"""A namespace ResourceQuota the preflight does not model refuses the started pods, on the cluster.

The preflight's quota is ``requests.nvidia.com/gpu`` (``accounts.check_quota``); a namespace can
also cap ``pods`` or ``requests.cpu``. Quota is enforced at pod *create*: the ReplicaSet
controller's create is refused with 403 ``exceeded quota``, it records a Warning
``FailedCreate`` event and sets ``ReplicaFailure=True`` (reason ``FailedCreate``) on the
ReplicaSet, which the Deployment controller copies onto the Deployment
(``pkg/controller/replicaset/replica_set_utils.go`` ``calculateStatus``; ``pkg/controller/
deployment/progress.go``; ``kubectl describe rs`` under a quota shows "ReplicaFailure True
FailedCreate" and "Warning FailedCreate … is forbidden: failed quota", development-plate/
k8s-tutorials add-resourcequota2/README.md).
The ReplicaSet keeps retrying, so without reading the condition B would sit at 0 pods until
``readiness_timeout`` (30 min).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gps_dagster.testing.k8s.pools import wait_quotas_counted
from tests.engine.harness import A, B, a_running_pool, local, seed_schedule
from tests.k8s.test_engine_on_cluster import EVENING


@pytest.mark.parametrize(
    ("resource", "hard"),
    [
        ("pods", "1"),  # A and C run 2 pods; after A's release C alone fills it
        ("requests.cpu", "15m"),  # A and C ask 10m each; after A's release B's 10m is over
    ],
)
def test_item11_a_resourcequota_failed_create_after_a_passed_preflight_is_start_refused_at_once(
    new_world: Any, resource: str, hard: str
) -> None:
    """Issue 18 item 11 (API-side refusals after a passed preflight are silent), with a
    ResourceQuota on ``pods`` / ``requests.cpu`` in B's namespace: every preflight passes (no GPU
    quota), A is released, B's start is written, and the API server refuses B's pod. B ends
    terminal ``start_refused`` carrying the API server's own words within a pass or two of the
    boundary — not ``awaiting_ready`` until the 30 min deadline.

    Mutation caught: ``views.refused`` ignoring the Deployment's ``ReplicaFailure`` condition (or
    ``deploy_view`` not passing it on): B stays ``starting``/``awaiting_ready`` at 18:04."""
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    _, ns, _ = w.cluster.workloads[B]
    assert w.cluster.workloads[A][1] == ns  # one namespace, one quota
    kube = w.cluster.kube
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "tenant-cap"},
        "spec": {"hard": {resource: hard}},
    }
    kube.call(kube.core.create_namespaced_resource_quota, ns, body, what="quota", mutating=True)
    wait_quotas_counted(kube, [ns])  # until computed, quota admission refuses every pod
    w.run_until(local("2026-10-19T18:04"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("start_refused", "start_refused"), (st.phase, st.fix)
    assert "exceeded quota" in (st.fix or "") and "tenant-cap" in (st.fix or ""), st.fix
    assert resource in (st.fix or ""), st.fix  # the API's message names what was exceeded
    assert st.phase_since <= local("2026-10-19T18:00") + timedelta(minutes=4)
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]
