"""GPU nodes tainted ``nvidia.com/gpu:NoSchedule`` (as GKE taints them), on the control plane.

The API server of the test cluster runs the ExtendedResourceToleration admission plugin
(``controlplane.ADMISSION_PLUGINS``) and every fake GPU node carries ``nodes.GPU_TAINT``. The
plugin changes *pods* at admission, never the Deployment's template the preview reads: "this
admission controller when enabled, automatically adds a toleration with key
example.com/device, operator Exists and effect NoSchedule if an extended resource of name
example.com/device is requested" (kubernetes/kubernetes#55839); its ``Admit`` walks the
``resources.requests`` *keys* of containers and init containers (``plugin/pkg/admission/
extendedresourcetoleration/admission.go``), whatever the quantity. Requests are defaulted from
limits before admission, so a limits-only GPU container (NVIDIA's own examples) gets it too.
"""

from __future__ import annotations

import time
from typing import Any

from gps_dagster.backends.k8s import capacity, names, pods
from gps_dagster.ports import DeployState, Fits, Insufficient
from gps_dagster.testing.k8s.nodes import GPU_TAINT
from gps_dagster.testing.k8s.pools import POOL_LABEL
from tests.k8s.test_adapter_on_cluster import Pool
from tests.k8s.test_verdicts import create, read_deployment

GPU_TOLERATION = {"key": names.GPU, "operator": "Exists", "effect": "NoSchedule"}


def one_node() -> dict[str, Any]:
    return {
        "name": "tainted",
        "nodes": [{"name": "n1", "gpus": 8}],
        "deploys": [{"id": "g", "gpus_per_replica": 2}],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def gpu_tolerations(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        t for t in (obj.get("spec") or {}).get("tolerations") or [] if t.get("key") == names.GPU
    ]


def own_pods(p: Pool, namespace: str, app: str) -> list[dict[str, Any]]:
    return p.admin.items(
        p.admin.core.list_namespaced_pod, namespace, label_selector=f"app={app}", what="pods"
    )


def wait_ready(p: Pool, deploy: str) -> Any:
    """The fakes settled and the deploy READY (bounded: the controllers run on wall time)."""
    deadline = time.monotonic() + 60
    while True:
        p.cluster.settle()
        view = p.core.get_deploy(deploy)
        if view.state is DeployState.READY or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def test_item8_a_gpu_template_without_the_toleration_fits_and_starts_on_a_tainted_gpu_node(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """Issue 18 item 8 (GPU nodes tainted ``nvidia.com/gpu`` never fit). The template asks for
    GPUs by *limits only* and has no toleration; the pool's only node is tainted. The preview says
    Fits (it mirrors the plugin), the real start is Ready on that node, and the pod the API server
    admitted carries exactly the toleration the preview assumed. A CPU-only template of the same
    pool gets no toleration, from the plugin or the preview: no node fits it, and the scheduler
    agrees (its pod stays Pending on the taint).

    Mutations caught: ``capacity.admitted_tolerations`` returning only the template's tolerations
    (the preview says ``no_matching_flavor`` for the GPU template); adding the toleration for
    every pod, or only for positive quantities read from ``requests`` (the limits-only template
    loses it / the CPU-only one gains it, and the CPU-only preview says Fits where the scheduler
    refuses)."""
    p = Pool(one_node(), sqlite_url)
    try:
        _, ns, name = p.workload("g")
        node = p.admin.items(
            p.admin.core.list_node,
            label_selector=f"{POOL_LABEL}={p.cluster.layout.prefix}",
            what="nodes",
        )
        assert len(node) == 1 and GPU_TAINT in (node[0]["spec"].get("taints") or [])
        limits_only = {"limits": {names.GPU: "2", "cpu": "10m", "memory": "16Mi"}}
        container = {
            **p.cluster.template(p.spec.deploy("g"))["spec"]["containers"][0],
            "resources": limits_only,
        }
        p.patch("g", {"spec": {"template": {"spec": {"containers": [container]}}}})
        template = read_deployment(p, ns, name)["spec"]["template"]
        assert gpu_tolerations(template) == []  # the template never says it
        assert template["spec"]["containers"][0]["resources"].get("requests") in (None, {})

        assert p.core.preview_capacity("g", delta_replicas=1) == Fits(groups=1)
        view = p.core.get_deploy("g")
        p.core.start("g", etag=view.etag, idempotency_key="k")
        ready = wait_ready(p, "g")
        assert ready.state is DeployState.READY and ready.ready_replicas == 1, ready
        [pod] = [
            q
            for q in own_pods(p, ns, template["metadata"]["labels"]["app"])
            if not pods.deleting(q)
        ]
        assert pods.node(pod) == node[0]["metadata"]["name"]
        assert gpu_tolerations(pod) == [GPU_TOLERATION]  # added by the admission plugin
        assert GPU_TOLERATION in capacity.admitted_tolerations(template["spec"])  # = the mirror

        # A CPU-only template in the same pool: nothing tolerates the taint, on either side.
        cpu = {**container, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "cpu-only", "labels": {names.DEPLOY_ID: "cpu-only"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "cpu-only"}},
                "template": {
                    "metadata": {"labels": {"app": "cpu-only", names.DEPLOY_ID: "cpu-only"}},
                    "spec": {**template["spec"], "containers": [cpu]},
                },
            },
        }
        create(p, ns, body)
        spec = read_deployment(p, ns, "cpu-only")["spec"]["template"]["spec"]
        assert gpu_tolerations({"spec": {"tolerations": capacity.admitted_tolerations(spec)}}) == []
        preview = p.core.preview_capacity("cpu-only", delta_replicas=1)
        assert isinstance(preview, Insufficient) and preview.reason == "no_matching_flavor"
        p.admin.merge_patch(
            p.admin.apps.patch_namespaced_deployment,
            "cpu-only",
            ns,
            body={"spec": {"replicas": 1}},
            what="scale cpu-only",
        )
        deadline = time.monotonic() + 60  # the ReplicaSet controller and the scheduler (wall time)
        while True:
            found = own_pods(p, ns, "cpu-only")
            if found and pods.unschedulable(found[0]):
                break
            assert time.monotonic() < deadline, f"cpu-only never judged: {found}"
            time.sleep(0.1)
        assert gpu_tolerations(found[0]) == [] and pods.node(found[0]) is None
        message = next(
            c.get("message", "")
            for c in found[0]["status"]["conditions"]
            if c["type"] == "PodScheduled"
        )
        assert "taint" in message and names.GPU in message, message
    finally:
        p.close()
