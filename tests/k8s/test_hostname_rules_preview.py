"""Required pod anti-affinity and topology spread on ``kubernetes.io/hostname``: the capacity
preview agrees with the real kube-scheduler, and says ``preview_unsupported`` where it does not
model a rule.

What the scheduler does, as documented in the API types:

* required anti-affinity — "If the anti-affinity requirements specified by this field are not
  met at scheduling time, the pod will not be scheduled onto the node" (``PodAntiAffinity.
  requiredDuringSchedulingIgnoredDuringExecution``);
* spread — "When whenUnsatisfiable=DoNotSchedule, [maxSkew] is the maximum permitted difference
  between the number of matching pods in the target topology and the global minimum"
  (``TopologySpreadConstraint.maxSkew``); the domains are the nodes that pass the pod's
  nodeSelector/required node affinity (1.20 ``podtopologyspread`` PreFilter), whether they have
  room or not — a full node still counts as a domain holding 0 matching pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.ports import Fits, Insufficient
from gps_dagster.testing.k8s.pools import POOL_LABEL
from tests.k8s.test_adapter_on_cluster import Pool
from tests.k8s.test_verdicts import create, deployment


def two_nodes() -> dict[str, Any]:
    return {
        "name": "hostname-rules",
        "nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}],
        "deploys": [{"id": "idle", "gpus_per_replica": 1}],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def pool_nodes(p: Pool) -> list[str]:
    found = p.admin.items(
        p.admin.core.list_node,
        label_selector=f"{POOL_LABEL}={p.cluster.layout.prefix}",
        what="nodes",
    )
    return sorted(n["metadata"]["name"] for n in found)


def tenant_deployment(p: Pool, app: str, replicas: int, rules: dict[str, Any]) -> None:
    """A tenant's Deployment (``app:`` selector, RollingUpdate) on this pool's nodes only."""
    spec = {"nodeSelector": {POOL_LABEL: p.cluster.layout.prefix}, **rules}
    create(p, p.cluster.layout.admin, deployment(app, app, replicas=replicas, gpus=1, spec=spec))


def app_pods(p: Pool, app: str) -> list[dict[str, Any]]:
    found = p.admin.items(
        p.admin.core.list_namespaced_pod,
        p.cluster.layout.admin,
        label_selector=f"app={app}",
        what="pods",
    )
    return [q for q in found if not pods.deleting(q)]


def wait(what: str, done: Callable[[], bool]) -> None:
    """Bounded poll: the controllers and the scheduler run on wall time."""
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def schedulers_refusal(p: Pool, app: str, replicas: int) -> str:
    """Scale ``app`` to ``replicas`` behind the preview's back; the scheduler's message for the
    one pod it cannot place (the others bound)."""
    p.admin.merge_patch(
        p.admin.apps.patch_namespaced_deployment,
        app,
        p.cluster.layout.admin,
        body={"spec": {"replicas": replicas}},
        what="scale",
    )
    wait(
        f"{app} x{replicas} judged",
        lambda: (
            len(app_pods(p, app)) == replicas
            and any(pods.unschedulable(q) for q in app_pods(p, app))
        ),
    )
    [refused] = [q for q in app_pods(p, app) if not pods.node(q)]
    return next(
        str(c.get("message") or "")
        for c in refused["status"]["conditions"]
        if c["type"] == "PodScheduled"
    )


def anti_affinity(app: str, key: str = names.HOSTNAME) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }


def test_item9_required_anti_affinity_on_hostname_is_not_fits_where_the_scheduler_refuses(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """Issue 18 item 9 (preview says Fits where the scheduler refuses), required pod
    anti-affinity on hostname: two replicas, one per node, 14 GPUs free. A GPU-counting preview
    says a third fits; the scheduler refuses it (``didn't match pod anti-affinity rules``), and so
    must the preview. Mutation caught: ``capacity._rules_ok`` skipping the anti-affinity terms
    (or ``_world`` not recording the bound pods' labels): the preview says Fits."""
    p = Pool(two_nodes(), sqlite_url)
    try:
        tenant_deployment(p, "anti", 2, anti_affinity("anti"))
        wait("anti x2 bound", lambda: len([q for q in app_pods(p, "anti") if pods.node(q)]) == 2)
        assert {pods.node(q) for q in app_pods(p, "anti")} == set(pool_nodes(p))
        preview = p.core.preview_capacity("anti", delta_replicas=1)
        assert isinstance(preview, Insufficient), preview
        assert (preview.reason, preview.groups_fitting) == ("insufficient_capacity", 0)
        assert sum(preview.free_by_node.values()) == 14  # the GPUs are there; the rule says no
        message = schedulers_refusal(p, "anti", 3)
        assert "anti-affinity" in message, message  # the scheduler agrees
    finally:
        p.close()


def test_item9_topology_spread_on_hostname_is_not_fits_where_the_scheduler_refuses(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """Issue 18 item 9, ``DoNotSchedule`` topology spread on hostname (maxSkew 1): another
    tenant's pod fills the first node, our one replica is on the second (7 GPUs free there). A
    second replica there would make the skew 2 − 0 against the full node, which is still a
    domain: the scheduler refuses (``didn't match pod topology spread constraints``), and so
    must the preview. Mutation caught: ``capacity._rules_ok`` skipping the spread constraints,
    or counting only nodes with room as domains: the preview says Fits."""
    p = Pool(two_nodes(), sqlite_url)
    try:
        full, free = pool_nodes(p)
        p.cluster.add_foreign("hog", 8, "static", node=full)
        spread = {
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": names.HOSTNAME,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "spread"}},
                }
            ]
        }
        tenant_deployment(p, "spread", 1, spread)
        wait("spread x1 bound", lambda: any(pods.node(q) for q in app_pods(p, "spread")))
        assert [pods.node(q) for q in app_pods(p, "spread")] == [free]
        preview = p.core.preview_capacity("spread", delta_replicas=1)
        assert isinstance(preview, Insufficient), preview
        assert preview.free_by_node == {free: 7}  # room, but not within the skew
        message = schedulers_refusal(p, "spread", 2)
        assert "topology spread" in message, message
    finally:
        p.close()


def test_item9_anti_affinity_on_another_topology_is_preview_unsupported_not_fits(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """What the preview does not model (anti-affinity across zones) is said, never a Fits it
    cannot vouch for. Mutation caught: ``capacity.unsupported`` accepting any topology key."""
    p = Pool(two_nodes(), sqlite_url)
    try:
        tenant_deployment(p, "zonal", 0, anti_affinity("zonal", "topology.kubernetes.io/zone"))
        preview = p.core.preview_capacity("zonal", delta_replicas=1)
        assert isinstance(preview, Insufficient) and not isinstance(preview, Fits)
        assert preview.reason == "preview_unsupported:pod_anti_affinity_topology"
    finally:
        p.close()
