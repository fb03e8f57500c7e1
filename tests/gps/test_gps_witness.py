from typing import Any

from gps_fixtures import GPU42_UUID, uuid_n

from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.gps.witness import (
    PLACEMENT_MISMATCH,
    Confirmed,
    Mismatch,
    Unknown,
    annotation_uuids,
    judge,
    witness_pod,
)
from gps_dagster.domain.render import dra


def _pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "b-0", "namespace": "cmp-vision", "annotations": annotations or {}}
    }


def test_the_node_agents_annotation_inside_the_reservation_confirms(gpu42: Reservation) -> None:
    pod = _pod({"gps.dagster.io/container.vllm.gpus.devices": GPU42_UUID})
    assert witness_pod(pod, gpu42.id, gpu42.gpu_uuids) == Confirmed((GPU42_UUID,), "node_agent")


def test_uuid_case_does_not_matter(gpu42: Reservation) -> None:
    pod = _pod({"gps.dagster.io/container.vllm.gpus.devices": "GPU-" + GPU42_UUID[4:].upper()})
    assert isinstance(witness_pod(pod, gpu42.id, gpu42.gpu_uuids), Confirmed)


def test_a_foreign_uuid_is_a_terminal_mismatch_with_a_fix(gpu42: Reservation) -> None:
    other = uuid_n(7)
    pod = _pod({"gps.dagster.io/container.vllm.gpus.devices": f"{GPU42_UUID}, {other}"})
    got = witness_pod(pod, gpu42.id, gpu42.gpu_uuids)
    assert isinstance(got, Mismatch)
    assert got.reason == PLACEMENT_MISMATCH == "placement_mismatch"
    assert got.uuids == (GPU42_UUID, other) and got.outside == (other,)
    assert other in got.fix and "rsv-gpu42-shared" in got.fix and "no automatic repair" in got.fix


def test_missing_or_empty_annotation_is_unknown_not_mismatch(gpu42: Reservation) -> None:
    assert isinstance(witness_pod(_pod(), gpu42.id, gpu42.gpu_uuids), Unknown)
    assert isinstance(
        witness_pod(
            _pod({"gps.dagster.io/container.vllm.gpus.devices": " "}), gpu42.id, gpu42.gpu_uuids
        ),
        Unknown,
    )
    assert isinstance(witness_pod({}, gpu42.id, gpu42.gpu_uuids), Unknown)


def test_annotations_of_several_containers_and_a_container_filter() -> None:
    pod = _pod(
        {
            "gps.dagster.io/container.vllm.gpus.devices": uuid_n(1),
            "gps.dagster.io/container.sidecar.gpus.devices": uuid_n(2),
            "nvidia.com/gpus.devices": uuid_n(3),  # not the agent's per-container key
            "nvidia.com/container.other.gpus.devices": uuid_n(4),  # no real component writes it
        }
    )
    assert annotation_uuids(pod) == (uuid_n(2), uuid_n(1))
    assert annotation_uuids(pod, container="vllm") == (uuid_n(1),)
    assert annotation_uuids(pod, container="other") is None


def test_dcgm_samples_are_the_fallback(gpu42: Reservation) -> None:
    samples = [
        {"UUID": uuid_n(9), "namespace": "cmp-vision", "pod": "other-0", "container": "vllm"},
        {"UUID": GPU42_UUID, "namespace": "cmp-vision", "pod": "b-0", "container": "vllm"},
        {"UUID": uuid_n(8), "namespace": "elsewhere", "pod": "b-0", "container": "vllm"},
    ]
    assert witness_pod(_pod(), gpu42.id, gpu42.gpu_uuids, dcgm=samples) == Confirmed(
        (GPU42_UUID,), "dcgm"
    )
    bad = [{"UUID": uuid_n(9), "namespace": "cmp-vision", "pod": "b-0", "container": "vllm"}]
    assert isinstance(witness_pod(_pod(), gpu42.id, gpu42.gpu_uuids, dcgm=bad), Mismatch)


def test_annotation_wins_over_dcgm(gpu42: Reservation) -> None:
    pod = _pod({"gps.dagster.io/container.vllm.gpus.devices": GPU42_UUID})
    bad = [{"UUID": uuid_n(9), "namespace": "cmp-vision", "pod": "b-0"}]
    assert isinstance(witness_pod(pod, gpu42.id, gpu42.gpu_uuids, dcgm=bad), Confirmed)


def _claim(results: list[dict[str, str]] | None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": dra.V1ALPHA3,
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {},
    }
    if results is not None:
        claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


SLICES = [
    {
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "hla-worker-042"},
            "devices": [
                {
                    "name": "gpu-0",
                    "basic": {"attributes": {"uuid": {"string": GPU42_UUID}, "index": {"int": 0}}},
                },
                {"name": "gpu-1", "basic": {"attributes": {"uuid": {"string": uuid_n(1)}}}},
            ],
        }
    },
    {
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "hla-worker-043"},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {"uuid": {"string": uuid_n(2)}},
                },  # resource.k8s.io/v1 shape
            ],
        }
    },
]


def test_track_h_witness_is_the_claims_allocation(gpu42: Reservation) -> None:
    ok = _claim(
        [
            {
                "request": "gpu",
                "driver": "gpu.nvidia.com",
                "pool": "hla-worker-042",
                "device": "gpu-0",
            }
        ]
    )
    assert dra.claim_uuids(ok, SLICES) == (GPU42_UUID,)
    assert isinstance(
        judge(dra.claim_uuids(ok, SLICES), gpu42.id, gpu42.gpu_uuids, source="claim"), Confirmed
    )
    bad = _claim(
        [
            {
                "request": "gpu",
                "driver": "gpu.nvidia.com",
                "pool": "hla-worker-043",
                "device": "gpu-0",
            }
        ]
    )
    assert dra.claim_uuids(bad, SLICES) == (uuid_n(2),)
    assert isinstance(
        judge(dra.claim_uuids(bad, SLICES), gpu42.id, gpu42.gpu_uuids, source="claim"), Mismatch
    )


def test_unallocated_claim_or_unknown_device_is_unknown(gpu42: Reservation) -> None:
    assert dra.allocated_devices(_claim(None)) is None
    assert dra.claim_uuids(_claim(None), SLICES) is None
    ghost = _claim(
        [
            {
                "request": "gpu",
                "driver": "gpu.nvidia.com",
                "pool": "hla-worker-042",
                "device": "gpu-7",
            }
        ]
    )
    assert dra.allocated_devices(ghost) == (
        dra.AllocatedDevice("gpu", "gpu.nvidia.com", "hla-worker-042", "gpu-7"),
    )
    assert dra.claim_uuids(ghost, SLICES) is None
    assert isinstance(judge(None, gpu42.id, gpu42.gpu_uuids, source="claim"), Unknown)


def test_an_annotation_no_real_component_writes_is_no_evidence(gpu42: Reservation) -> None:
    """``nvidia.com/container.<c>.gpus.devices`` is written by no NVIDIA component (only by a
    fake or by hand): the witness must not trust it, only the node agent's PodResources record."""
    pod = _pod({"nvidia.com/container.vllm.gpus.devices": GPU42_UUID})
    assert isinstance(witness_pod(pod, gpu42.id, gpu42.gpu_uuids), Unknown)
