"""Golden-file tests of the pure renderers, each golden validated against the Kubernetes schemas.

Regenerate after an intended change with ``GPS_UPDATE_GOLDEN=1 pytest tests/gps/test_gps_render.py``
and review the diff.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
import yaml
from gps_fixtures import GOLDEN, T0, uuid_n
from hypothesis import given
from hypothesis import strategies as st

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.reservations import Reservation, SharingMode
from gps_dagster.domain.render import dra, kai

POLICY = kai.SchedulingPolicy(scheduler_name="kai-scheduler")
K8S = "1.31.0"
TENANT_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "md-qwen-b-0",
        "namespace": "default",
        "labels": {"app": "md-qwen-b", "kai.scheduler/queue": "vip", "runai/queue": "old"},
        "annotations": {"gpu-fraction": "0.5"},
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "nodeName": "hla-worker-001",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": ["hla-worker-001"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.11.0",
                "args": ["--model", "/models/qwen", "--max-model-len", "8192"],
                "resources": {
                    "limits": {"nvidia.com/gpu": 1, "memory": "64Gi"},
                    "requests": {"cpu": "4", "memory": "64Gi"},
                },
            }
        ],
    },
}


def _member(rsv: Reservation) -> kai.Rendered:
    return kai.render_member_pod(
        TENANT_POD,
        reservation=rsv,
        deploy_id="md-qwen-b",
        project="vision",
        memory_mib=40_000,
        policy=POLICY,
        vllm_container="vllm",
    )


def _golden(name: str, manifest: dict[str, Any]) -> dict[str, Any]:
    path = GOLDEN / name
    text = yaml.safe_dump(manifest, sort_keys=True)
    if os.environ.get("GPS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with GPS_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from its golden file"
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_track_s_member_pod_golden(gpu42: Reservation) -> None:
    _golden("track-s-member-pod.yaml", _member(gpu42).manifest)


def test_track_s_member_pod_is_pinned_queued_and_sized_by_the_server(gpu42: Reservation) -> None:
    pod = _member(gpu42).manifest
    assert pod["metadata"]["namespace"] == "cmp-vision"
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "cmp-vision"
    assert "runai/queue" not in pod["metadata"]["labels"]
    assert pod["metadata"]["annotations"] == {"gpu-memory": "40000"}
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "hla-worker-042"}
    assert "nodeName" not in pod["spec"] and "affinity" not in pod["spec"]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits and limits["memory"] == "64Gi"
    assert pod["spec"]["containers"][0]["args"][-2:] == ["--gpu-memory-utilization", "0.27"]


def test_tenant_overrides_are_reported_as_dropped(gpu42: Reservation) -> None:
    dropped = {(d.path, str(d.value), d.reason) for d in _member(gpu42).dropped}
    assert dropped == {
        ("metadata.namespace", "default", "namespace_is_the_reservation's"),
        ("metadata.labels[kai.scheduler/queue]", "vip", "queue_is_server_derived"),
        ("metadata.labels[runai/queue]", "old", "queue_is_server_derived"),
        ("metadata.annotations[gpu-fraction]", "0.5", "gpu_share_is_memory_mib"),
        ("spec.schedulerName", "default-scheduler", "scheduler_is_server_derived"),
        ("spec.nodeName", "hla-worker-001", "node_is_the_reservation's"),
        (
            "spec.affinity.nodeAffinity",
            str(TENANT_POD["spec"]["affinity"]["nodeAffinity"]),
            "node_is_the_reservation's",
        ),
        ("spec.containers[0].resources.limits[nvidia.com/gpu]", "1", "gpu_share_is_memory_mib"),
    }


def test_rendering_does_not_mutate_the_tenant_pod(gpu42: Reservation) -> None:
    before = copy.deepcopy(TENANT_POD)
    _member(gpu42)
    assert before == TENANT_POD


def test_a_clean_tenant_pod_drops_nothing(gpu42: Reservation) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    got = kai.render_member_pod(
        pod, reservation=gpu42, deploy_id="d", project="vision", memory_mib=1, policy=POLICY
    )
    assert got.dropped == ()
    kubernetes_validate.validate(got.manifest, K8S, strict=True)


@given(
    scheduler=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    project=st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True),
)
def test_scheduler_and_queue_come_from_the_policy(scheduler: str, project: str) -> None:
    from gps_fixtures import gpu42_reservation

    policy = kai.SchedulingPolicy(scheduler_name=scheduler, queue_template="team-{project}")
    rsv = gpu42_reservation()
    pod = kai.render_member_pod(
        {"spec": {}}, reservation=rsv, deploy_id="d", project=project, memory_mib=5, policy=policy
    ).manifest
    holder = kai.render_holder_pod(rsv, project=project, policy=policy)
    for p in (pod, holder):
        assert p["spec"]["schedulerName"] == scheduler
        assert p["metadata"]["labels"]["kai.scheduler/queue"] == f"team-{project}"


def test_holder_pod_golden(gpu42: Reservation) -> None:
    holder = _golden(
        "track-s-holder-pod.yaml", kai.render_holder_pod(gpu42, project="vision", policy=POLICY)
    )
    assert holder["metadata"]["name"] == "rsv-gpu42-shared-holder"
    assert holder["metadata"]["annotations"] == {"gpu-memory": str(kai.HOLDER_MEMORY_MIB)}
    assert holder["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "hla-worker-042"}
    assert "nvidia.com/gpu" not in str(holder["spec"]["containers"][0]["resources"])


def test_holder_share_fits_in_the_headroom(gpu42: Reservation) -> None:
    assert gpu42.budget_mib + kai.HOLDER_MEMORY_MIB <= gpu42.gpu_memory_mib


def test_track_h_claim_golden(gpu42: Reservation) -> None:
    claim = _golden("track-h-resource-claim.yaml", dra.render_resource_claim(gpu42))
    request = claim["spec"]["devices"]["requests"][0]
    assert request["selectors"][0]["cel"]["expression"] == (
        'device.driver == "gpu.nvidia.com" && '
        'device.attributes["gpu.nvidia.com"].uuid in ["GPU-6b167f5c-6cc2-532d-abb5-84dd1e9ffaa0"]'
    )
    params = claim["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["kind"] == "GpuConfig" and params["sharing"]["strategy"] == "TimeSlicing"


def test_track_h_claim_v1_golden(gpu42: Reservation) -> None:
    claim = _golden(
        "track-h-resource-claim-v1.yaml", dra.render_resource_claim(gpu42, api_version=dra.V1)
    )
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    kubernetes_validate.validate(claim, "1.34.0", strict=True)


def test_track_h_member_pod_golden(gpu42: Reservation) -> None:
    rendered = dra.render_member_pod(
        TENANT_POD, reservation=gpu42, deploy_id="md-qwen-b", project="vision", policy=POLICY
    )
    pod = _golden("track-h-member-pod.yaml", rendered.manifest)
    assert "annotations" not in pod["metadata"]
    assert ("spec.nodeName", "hla-worker-001") in {(d.path, str(d.value)) for d in rendered.dropped}
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimName": "rsv-gpu42-shared-gpus"}
    ]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]


def test_exclusive_claim_counts_every_gpu_and_has_no_sharing() -> None:
    rsv = Reservation(
        id="r2",
        node="n2",
        gpu_uuids=tuple(uuid_n(i) for i in range(8)),
        namespace="ns",
        mode=SharingMode.EXCLUSIVE,
        gpu_memory_mib=143771,
        created_at=T0,
    )
    claim = dra.render_resource_claim(rsv)
    assert claim["spec"]["devices"]["requests"][0]["count"] == 8
    assert "config" not in claim["spec"]["devices"]
    assert all(
        u in claim["spec"]["devices"]["requests"][0]["selectors"][0]["cel"]["expression"]
        for u in rsv.gpu_uuids
    )
    kubernetes_validate.validate(claim, K8S, strict=True)


def test_unknown_claim_api_is_refused(gpu42: Reservation) -> None:
    with pytest.raises(ValueError, match="unsupported"):
        dra.render_resource_claim(gpu42, api_version="resource.k8s.io/v1beta9")


V131_GOLDENS = [
    "track-s-member-pod.yaml",
    "track-s-holder-pod.yaml",
    "track-h-resource-claim.yaml",
    "track-h-member-pod.yaml",
]


@pytest.mark.parametrize("name", V131_GOLDENS)
def test_golden_validates_strictly_against_kubernetes_1_31(name: str) -> None:
    kubernetes_validate.validate(yaml.safe_load((GOLDEN / name).read_text()), K8S, strict=True)


def test_validator_would_catch_a_bad_manifest(gpu42: Reservation) -> None:
    pod = kai.render_holder_pod(gpu42, project="vision", policy=POLICY)
    pod["spec"]["nodeSelectr"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S, strict=True)


def test_goldens_pass_the_kubernetes_validate_command() -> None:
    files = [str(GOLDEN / n) for n in V131_GOLDENS]
    done = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S, *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_contradicting_vllm_args_in_the_tenant_pod_are_rejected_with_their_path(
    gpu42: Reservation,
) -> None:
    pod = copy.deepcopy(TENANT_POD)
    pod["spec"]["containers"].insert(0, {"name": "init", "image": "busybox"})
    pod["spec"]["containers"][1]["args"] += ["--gpu-memory-utilization=0.9"]
    with pytest.raises(SpecInvalid) as exc:
        kai.render_member_pod(
            pod,
            reservation=gpu42,
            deploy_id="d",
            project="vision",
            memory_mib=40_000,
            policy=POLICY,
            vllm_container="vllm",
        )
    assert [(e.path, e.reason) for e in exc.value.errors] == [
        ("spec.containers[1].args[4]", "gpu_memory_utilization_conflict")
    ]
    with pytest.raises(SpecInvalid) as exc:
        kai.render_member_pod(
            TENANT_POD,
            reservation=gpu42,
            deploy_id="d",
            project="vision",
            memory_mib=1,
            policy=POLICY,
            vllm_container="nope",
        )
    assert exc.value.reasons == ("unknown_container",)


node_names = st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True)


@given(
    node_name=node_names,
    selector=node_names,
    key=st.sampled_from(["kubernetes.io/hostname", "zone", "gpu"]),
)
def test_a_tenant_can_never_widen_or_move_the_node_pin(
    node_name: str, selector: str, key: str
) -> None:
    from gps_fixtures import gpu42_reservation

    rsv = gpu42_reservation()
    tenant = {
        "spec": {
            "nodeName": node_name,
            "nodeSelector": {key: selector},
            "affinity": {"nodeAffinity": {}, "podAntiAffinity": {}},
        }
    }
    spec = kai.render_member_pod(
        tenant, reservation=rsv, deploy_id="d", project="p", memory_mib=1, policy=POLICY
    ).manifest["spec"]
    assert "nodeName" not in spec and "nodeAffinity" not in spec["affinity"]
    assert spec["nodeSelector"]["kubernetes.io/hostname"] == "hla-worker-042"
