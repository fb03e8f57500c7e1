"""The kubelet's two local gRPC APIs as protobuf messages, built at import (no generated code).

* ``podresources.v1`` (``PodResourcesLister.List``): the device ids the kubelet's device manager
  gave each container — what dcgm-exporter reads to map GPUs to pods, and what the node agent
  (``nodeagent``) publishes for the placement witness. Socket:
  ``<kubelet root>/pod-resources/kubelet.sock``.
* ``deviceplugin.v1beta1`` (``Registration.Register`` served by the kubelet,
  ``DevicePlugin.*`` served by a plugin): used by the fake GPU device plugin of the test node.

The field names and numbers are those of the kubelet 1.20 sources
(``staging/src/k8s.io/kubelet/pkg/apis/{podresources/v1,deviceplugin/v1beta1}/api.proto``);
``tests/k8s/test_kubelet_wire.py`` parses those files and compares, so a drift fails a test.
Building the descriptors with the protobuf runtime avoids a protoc/grpcio-tools build step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_T = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "string": _T.TYPE_STRING,
    "bool": _T.TYPE_BOOL,
    "int64": _T.TYPE_INT64,
    "int32": _T.TYPE_INT32,
}

# message -> [(name, number, type, repeated)]; a type not in _TYPES names a message;
# "map" is map<string, string>.
Fields = Sequence[tuple[str, int, str, bool]]

PODRESOURCES: dict[str, Fields] = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, "PodResources", True)],
    "PodResources": [
        ("name", 1, "string", False),
        ("namespace", 2, "string", False),
        ("containers", 3, "ContainerResources", True),
    ],
    "ContainerResources": [
        ("name", 1, "string", False),
        ("devices", 2, "ContainerDevices", True),
        ("cpu_ids", 3, "int64", True),
    ],
    "ContainerDevices": [
        ("resource_name", 1, "string", False),
        ("device_ids", 2, "string", True),
        ("topology", 3, "TopologyInfo", False),
    ],
    "TopologyInfo": [("nodes", 1, "NUMANode", True)],
    "NUMANode": [("ID", 1, "int64", False)],
}

DEVICEPLUGIN: dict[str, Fields] = {
    "DevicePluginOptions": [
        ("pre_start_required", 1, "bool", False),
        ("get_preferred_allocation_available", 2, "bool", False),
    ],
    "RegisterRequest": [
        ("version", 1, "string", False),
        ("endpoint", 2, "string", False),
        ("resource_name", 3, "string", False),
        ("options", 4, "DevicePluginOptions", False),
    ],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, "Device", True)],
    "TopologyInfo": [("nodes", 1, "NUMANode", True)],
    "NUMANode": [("ID", 1, "int64", False)],
    "Device": [
        ("ID", 1, "string", False),
        ("health", 2, "string", False),
        ("topology", 3, "TopologyInfo", False),
    ],
    "PreStartContainerRequest": [("devicesIDs", 1, "string", True)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [
        ("container_requests", 1, "ContainerPreferredAllocationRequest", True)
    ],
    "ContainerPreferredAllocationRequest": [
        ("available_deviceIDs", 1, "string", True),
        ("must_include_deviceIDs", 2, "string", True),
        ("allocation_size", 3, "int32", False),
    ],
    "PreferredAllocationResponse": [
        ("container_responses", 1, "ContainerPreferredAllocationResponse", True)
    ],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, "string", True)],
    "AllocateRequest": [("container_requests", 1, "ContainerAllocateRequest", True)],
    "ContainerAllocateRequest": [("devicesIDs", 1, "string", True)],
    "AllocateResponse": [("container_responses", 1, "ContainerAllocateResponse", True)],
    "ContainerAllocateResponse": [
        ("envs", 1, "map", False),
        ("mounts", 2, "Mount", True),
        ("devices", 3, "DeviceSpec", True),
        ("annotations", 4, "map", False),
    ],
    "Mount": [
        ("container_path", 1, "string", False),
        ("host_path", 2, "string", False),
        ("read_only", 3, "bool", False),
    ],
    "DeviceSpec": [
        ("container_path", 1, "string", False),
        ("host_path", 2, "string", False),
        ("permissions", 3, "string", False),
    ],
}

POD_RESOURCES_LIST = "/v1.PodResourcesLister/List"
REGISTER = "/v1beta1.Registration/Register"
DEVICE_PLUGIN_SERVICE = "v1beta1.DevicePlugin"
DEVICE_PLUGIN_VERSION = "v1beta1"


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _file(package: str, messages: Mapping[str, Fields]) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name=f"gps_{package}.proto", package=package, syntax="proto3"
    )
    for mname, fields in messages.items():
        m = f.message_type.add(name=mname)
        for fname, number, ftype, repeated in fields:
            fd = m.field.add(name=fname, number=number, json_name=fname)
            fd.label = _T.LABEL_REPEATED if repeated or ftype == "map" else _T.LABEL_OPTIONAL
            if ftype == "map":
                entry = m.nested_type.add(name=f"{_camel(fname)}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_T.TYPE_STRING, label=_T.LABEL_OPTIONAL)
                entry.field.add(
                    name="value", number=2, type=_T.TYPE_STRING, label=_T.LABEL_OPTIONAL
                )
                fd.type = _T.TYPE_MESSAGE
                fd.type_name = f".{package}.{mname}.{entry.name}"
            elif ftype in _TYPES:
                fd.type = _TYPES[ftype]
            else:
                fd.type = _T.TYPE_MESSAGE
                fd.type_name = f".{package}.{ftype}"
    return f


def _classes(package: str, messages: Mapping[str, Fields]) -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    fd = pool.Add(_file(package, messages))
    return {n: message_factory.GetMessageClass(fd.message_types_by_name[n]) for n in messages}


podresources = _classes("v1", PODRESOURCES)
"""Message classes of ``podresources.v1`` by name."""

deviceplugin = _classes("v1beta1", DEVICEPLUGIN)
"""Message classes of ``deviceplugin.v1beta1`` by name."""
