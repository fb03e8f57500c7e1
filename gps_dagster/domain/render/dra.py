"""Track H rendering (R-GPS-5): a DRA ``ResourceClaim`` pinned to the reservation's UUIDs.

Names from the NVIDIA DRA driver for GPUs: device class and driver
``gpu.nvidia.com``, device attribute ``uuid`` (CEL
``device.attributes["gpu.nvidia.com"].uuid``), and the opaque driver config
``resource.nvidia.com/v1beta1`` ``GpuConfig`` with ``sharing.strategy:
TimeSlicing``. Members of a time-sliced reservation all reference the *same*
claim (``resourceClaimName``), which is how the driver time-slices one GPU
between pods.

``resource.k8s.io/v1alpha3`` is the API the Kubernetes 1.31 schemas know and
the golden files are validated against; ``v1`` (1.34+) is rendered on request,
the difference being the ``exactly`` wrapper of a request.

The witness of track H is the claim's allocation result (R-GPS-7):
``status.allocation.devices.results`` names (driver, pool, device); the UUID of
each comes from the ``ResourceSlice`` that published the device.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gps_dagster.domain.gps.reservations import Reservation, SharingMode
from gps_dagster.domain.render.kai import RESERVATION_LABEL, Rendered, SchedulingPolicy, sanitise

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
UUID_ATTRIBUTE = "uuid"
GPU_CONFIG_API = "resource.nvidia.com/v1beta1"
V1ALPHA3 = "resource.k8s.io/v1alpha3"
V1 = "resource.k8s.io/v1"
REQUEST = "gpu"


def uuid_selector(uuids: Iterable[str]) -> str:
    """CEL that admits exactly the listed devices of the NVIDIA driver."""
    listed = ", ".join(json.dumps(u) for u in uuids)
    return (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].{UUID_ATTRIBUTE} in '
        f"[{listed}]"
    )


def claim_name(reservation_id: str) -> str:
    return f"{reservation_id[: 63 - len('-gpus')]}-gpus"


def render_resource_claim(
    reservation: Reservation, *, api_version: str = V1ALPHA3
) -> dict[str, Any]:
    """The claim every member of ``reservation`` shares; time-sliced reservations get the
    TimeSlicing config."""
    body: dict[str, Any] = {
        "deviceClassName": DEVICE_CLASS,
        "selectors": [{"cel": {"expression": uuid_selector(reservation.gpu_uuids)}}],
        "allocationMode": "ExactCount",
        "count": reservation.gpu_count,
    }
    if api_version == V1ALPHA3:
        request: dict[str, Any] = {"name": REQUEST, **body}
    elif api_version == V1:
        request = {"name": REQUEST, "exactly": body}
    else:
        raise ValueError(f"unsupported ResourceClaim API {api_version!r}; use {V1ALPHA3} or {V1}")
    devices: dict[str, Any] = {"requests": [request]}
    if reservation.mode is SharingMode.TIME_SLICED:
        devices["config"] = [
            {"requests": [REQUEST], "opaque": {"driver": DRIVER, "parameters": _time_slicing()}}
        ]
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim_name(reservation.id),
            "namespace": reservation.namespace,
            "labels": {RESERVATION_LABEL: reservation.id},
        },
        "spec": {"devices": devices},
    }


def _time_slicing() -> dict[str, Any]:
    return {
        "apiVersion": GPU_CONFIG_API,
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
    }


def render_member_pod(
    tenant_pod: Mapping[str, Any],
    *,
    reservation: Reservation,
    deploy_id: str,
    project: str,
    policy: SchedulingPolicy,
) -> Rendered:
    """A member pod that uses the reservation's shared claim instead of a KAI GPU share.

    Sanitised like track S (namespace, queue, scheduler, node pin, tenant GPU
    requests dropped and reported); the GPU comes only from the claim.
    """
    pod, dropped = sanitise(
        tenant_pod, reservation=reservation, deploy_id=deploy_id, project=project, policy=policy
    )
    spec = pod["spec"]
    spec["resourceClaims"] = [{"name": REQUEST, "resourceClaimName": claim_name(reservation.id)}]
    for container in spec.get("containers") or []:
        container.setdefault("resources", {})["claims"] = [{"name": REQUEST}]
    return Rendered(pod, dropped)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str


def allocated_devices(claim: Mapping[str, Any]) -> tuple[AllocatedDevice, ...] | None:
    """The devices a claim was allocated, or ``None`` while it is unallocated."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    results = (allocation.get("devices") or {}).get("results") or []
    return tuple(
        AllocatedDevice(
            str(r.get("request", "")), str(r["driver"]), str(r["pool"]), str(r["device"])
        )
        for r in results
        if isinstance(r, Mapping) and {"driver", "pool", "device"} <= r.keys()
    )


def slice_uuids(slices: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """``(driver, pool, device) → UUID`` from ResourceSlices (v1alpha3/v1beta1 ``basic`` or v1
    flat)."""
    out: dict[tuple[str, str, str], str] = {}
    for rs in slices:
        spec = rs.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            attrs = (device.get("basic") or device).get("attributes") or {}
            uuid = (attrs.get(UUID_ATTRIBUTE) or {}).get("string")
            if uuid:
                out[(driver, pool, device.get("name", ""))] = uuid
    return out


def claim_uuids(
    claim: Mapping[str, Any], slices: Iterable[Mapping[str, Any]]
) -> tuple[str, ...] | None:
    """The GPU UUIDs a claim got: ``None`` if unallocated or a device is not in any slice
    (unknown)."""
    devices = allocated_devices(claim)
    if not devices:
        return None
    index = slice_uuids(slices)
    found = [index.get((d.driver, d.pool, d.device)) for d in devices]
    if any(u is None for u in found):
        return None
    return tuple(u for u in found if u is not None)
