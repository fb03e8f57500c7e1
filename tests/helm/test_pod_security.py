"""Issue 18 item 4: every pod spec the chart renders, the run launcher builds and the adapter
creates passes Pod Security *restricted* (``tests/helm/psa.py``, written from the standard).

Before: no ``seccompProfile`` anywhere and a holder pod without ``drop: [ALL]`` that mounted a
ServiceAccount token — under ``pod-security.kubernetes.io/enforce: restricted`` every chart pod
and the holder were rejected (so the stop of a reservation's last time-sliced member failed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRun
from dagster_k8s import K8sRunLauncher
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import construct_dagster_k8s_job
from kubernetes.client import ApiClient

from gps_dagster.domain.render import kai
from tests.helm.helm_support import CI_VALUES, ci, container, dagster_yaml, env_of, one, template
from tests.helm.psa import restricted

TOKENLESS = {"migrate", "api-token"}
"""Pods that never talk to the API server: no ServiceAccount token mounted."""


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")
    }


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_rendered_pod_spec_passes_the_restricted_profile(values: Path) -> None:
    docs = template([values])
    # the node agent's own namespace is labelled privileged (its hostPath of the kubelet's
    # pod-resources directory); what it is allowed beyond restricted is pinned exactly in
    # tests/helm/test_node_agent.py
    privileged = {
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Namespace"
        and (d["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce")
        == "privileged"
    }
    specs = pod_specs([d for d in docs if d["metadata"].get("namespace") not in privileged])
    assert specs
    problems = {name: restricted(spec) for name, spec in specs.items()}
    assert {n: p for n, p in problems.items() if p} == {}


def test_the_checker_is_not_a_rubber_stamp() -> None:
    spec = pod_specs(template([ci("default")]))
    some = json.loads(json.dumps(next(iter(spec.values()))))
    some["securityContext"].pop("seccompProfile")
    some["containers"][0]["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}
    some["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    found = "\n".join(restricted(some))
    assert "seccompProfile" in found and "drop: must include ALL" in found
    assert "hostPath" in found


def test_hook_pods_mount_no_token(tmp_path: Path) -> None:
    docs = template([ci("default")])
    for name in TOKENLESS:
        assert (
            one(docs, "Job", name)["spec"]["template"]["spec"]["automountServiceAccountToken"]
            is False
        )


def _launcher(config: Mapping[str, Any], tmp_path: Path) -> K8sRunLauncher:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    return K8sRunLauncher(
        **{**config, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)}
    )


def _run_pod(launcher: K8sRunLauncher, context: K8sContainerContext) -> dict[str, Any]:
    """The run worker's pod spec exactly as K8sRunLauncher.launch_run builds its Job."""
    job = construct_dagster_k8s_job(
        context.get_k8s_job_config(job_image=None, run_launcher=launcher),
        ["dagster", "api", "execute_run"],
        "dagster-run-r1",
        user_defined_k8s_config=context.run_k8s_config,
        component="run_worker",
    )
    return dict(ApiClient().sanitize_for_serialization(job)["spec"]["template"]["spec"])


def test_the_run_launchers_job_pods_pass_in_both_modes(tmp_path: Path) -> None:
    run = DagsterRun(job_name="gps_transition", run_id="r1")
    full = template([ci("default")])
    launcher = _launcher(dagster_yaml(full)["run_launcher"]["config"], tmp_path)
    pod = _run_pod(launcher, K8sContainerContext.create_for_run(run, launcher, False))
    assert restricted(pod) == []
    assert pod["serviceAccountName"].endswith("-runs")
    existing = template([ci("existing-dagster")])  # the existing release's launcher + our context
    env = env_of(container(one(existing, "Deployment", "code-location")))
    ours = K8sContainerContext.create_from_config(json.loads(env["DAGSTER_CONTAINER_CONTEXT"]))
    bare = _launcher(
        {
            "instance_config_map": "their-instance",
            "dagster_home": "/opt/dagster",
            "service_account_name": "their-default",
        },
        tmp_path,
    )
    context = K8sContainerContext.create_for_run(run, bare, False).merge(ours)
    pod = _run_pod(bare, context)
    assert restricted(pod) == [] and pod["serviceAccountName"].endswith("-runs")


def test_the_holder_pod_the_adapter_creates_passes_and_mounts_no_token() -> None:
    from tests.gps.gps_fixtures import gpu42_reservation

    pod = kai.render_holder_pod(
        gpu42_reservation(),
        project="vision",
        policy=kai.SchedulingPolicy(scheduler_name="kai-scheduler"),
    )
    assert restricted(pod["spec"]) == []
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_the_exclusive_holder_pod_passes_and_mounts_no_token() -> None:
    from tests.gps.gps_fixtures import gpu42_reservation

    rsv = gpu42_reservation().model_copy(update={"mode": "exclusive"})
    pod = kai.render_exclusive_holder_pod(
        rsv, project="vision", policy=kai.SchedulingPolicy(scheduler_name="kai-scheduler")
    )
    assert restricted(pod["spec"]) == []
    assert pod["spec"]["automountServiceAccountToken"] is False
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == str(len(rsv.gpu_uuids))
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": rsv.node}
