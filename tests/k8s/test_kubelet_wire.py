"""The kubelet API messages we build at import (``kubelet_wire``) against the kubelet's own protos.

The protos are read from the Debian 1.20 source tree the control plane and kubelet are built
from (``~/.cache/gps_dagster/k8s/src``); a missing tree fails: run tools/k8s/build_control_plane.sh.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from gps_dagster.backends.k8s import kubelet_wire as wire
from gps_dagster.backends.k8s import nodeagent
from gps_dagster.testing.k8s import realnode
from gps_dagster.testing.k8s.deviceplugin import DevicePlugin

_MESSAGE = re.compile(r"message\s+(\w+)\s*\{([^{}]*)\}")
_FIELD = re.compile(r"^\s*(repeated\s+)?(map<string,\s*string>|\w+)\s+(\w+)\s*=\s*(\d+);", re.M)


def proto(rel: str) -> dict[str, list[tuple[str, int, str, bool]]]:
    trees = sorted((realnode.cache() / "src").glob("kubernetes-*/"))
    assert trees, "no kubelet source tree: run `bash tools/k8s/build_control_plane.sh`"
    text = (trees[0] / "staging/src/k8s.io/kubelet/pkg/apis" / rel).read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for name, body in _MESSAGE.findall(text):
        out[name] = [
            (fname, int(num), "map" if ftype.startswith("map<") else ftype, bool(rep))
            for rep, ftype, fname, num in _FIELD.findall(body)
        ]
    return out


@pytest.mark.parametrize(
    ("rel", "ours"),
    [
        ("podresources/v1/api.proto", wire.PODRESOURCES),
        ("deviceplugin/v1beta1/api.proto", wire.DEVICEPLUGIN),
    ],
)
def test_our_messages_are_the_kubelets(
    rel: str, ours: dict[str, list[tuple[str, int, str, bool]]]
) -> None:
    theirs = proto(rel)
    assert set(theirs) == set(ours)
    for name, fields in theirs.items():
        assert [tuple(f) for f in ours[name]] == fields, name


def test_no_source_is_witness_unavailable_with_the_fix() -> None:
    with pytest.raises(
        nodeagent.WitnessUnavailable, match=r"witness_unavailable.*--pod-resources-socket"
    ):
        nodeagent.source_from(pod_resources_socket=None, dcgm_url=None)


def test_an_unreachable_podresources_socket_is_witness_unavailable(tmp_path: Path) -> None:
    src = nodeagent.PodResourcesSource(socket=str(tmp_path / "none.sock"), timeout_s=0.5)
    with pytest.raises(nodeagent.WitnessUnavailable, match="unreachable"):
        src.devices()


def test_dcgm_samples_map_uuids_to_pod_containers() -> None:
    page = "\n".join([
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",Hostname="n1",'
        'container="server",namespace="ml",pod="b-0"} 97',
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",container="server",namespace="ml",'
        'pod="b-0"} 1000',
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",container="server",namespace="ml",pod="b-0"} 90',
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c",container="",namespace="",pod=""} 0',
    ])  # fmt: skip
    assert nodeagent.dcgm_devices(page) == {("ml", "b-0"): {"server": ("GPU-a", "GPU-b")}}


def test_the_device_plugin_allocates_visible_devices_and_prefers_as_told(tmp_path: Path) -> None:
    uuids = realnode.gpu_uuids(3, node="unit")
    plugin = DevicePlugin(tmp_path, uuids, cdi_annotations=True)
    plugin.serve()
    M = wire.deviceplugin
    try:
        with grpc.insecure_channel(f"unix:{plugin.socket}") as ch:
            alloc = ch.unary_unary(
                f"/{wire.DEVICE_PLUGIN_SERVICE}/Allocate",
                request_serializer=M["AllocateRequest"].SerializeToString,
                response_deserializer=M["AllocateResponse"].FromString,
            )
            resp = alloc(
                M["AllocateRequest"](container_requests=[{"devicesIDs": [uuids[1]]}]), timeout=5
            )
            assert dict(resp.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": uuids[1]}
            assert dict(resp.container_responses[0].annotations) == {
                "cdi.k8s.io/gps-fake-device-plugin": f"nvidia.com/gpu={uuids[1]}"
            }
            plugin.set_unhealthy([uuids[0]])
            with pytest.raises(grpc.RpcError) as err:
                alloc(
                    M["AllocateRequest"](container_requests=[{"devicesIDs": [uuids[0]]}]), timeout=5
                )
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            pref = ch.unary_unary(
                f"/{wire.DEVICE_PLUGIN_SERVICE}/GetPreferredAllocation",
                request_serializer=M["PreferredAllocationRequest"].SerializeToString,
                response_deserializer=M["PreferredAllocationResponse"].FromString,
            )
            plugin.set_prefer([uuids[2]])
            req = {"available_deviceIDs": list(uuids[1:]), "allocation_size": 1}
            got = pref(M["PreferredAllocationRequest"](container_requests=[req]), timeout=5)
            assert list(got.container_responses[0].deviceIDs) == [uuids[2]]
    finally:
        plugin.stop()
