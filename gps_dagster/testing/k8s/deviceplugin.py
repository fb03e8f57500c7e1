"""A fake NVIDIA GPU device plugin on the kubelet's real device-plugin API (deviceplugin/v1beta1).

Test support (and the demo on Kubernetes): the GPUs are fake, the protocol is the kubelet's.
It serves ``DevicePlugin`` on a unix socket in the kubelet's device-plugin directory and
registers ``nvidia.com/gpu`` with ``Registration.Register`` on ``kubelet.sock`` there
(``pkg/kubelet/cm/devicemanager`` in 1.20: the directory is fixed at
``/var/lib/kubelet/device-plugins/``, which is why the test node runs in a mount namespace).
Like NVIDIA's k8s-device-plugin (``internal/plugin/server.go``):

* ``ListAndWatch`` sends the device list at once and again on every health change: the kubelet
  sets allocatable ``nvidia.com/gpu`` to the healthy count;
* ``Allocate`` answers ``NVIDIA_VISIBLE_DEVICES=<uuid,...>`` per container (and, with
  ``cdi_annotations``, a ``cdi.k8s.io/...`` annotation naming ``nvidia.com/gpu=<uuid>``);
* ``GetPreferredAllocation`` returns the first devices in ``prefer`` order, then the rest:
  ``prefer`` is how a test makes the kubelet hand a pod a GPU outside its reservation.

A test steers the plugin through a JSON control file (``watch_control``):
``{"unhealthy": [uuid...], "prefer": [uuid...]}``; once applied, the plugin copies it to
``<file>.applied``, so a test waits for that instead of guessing how long the plugin takes.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gps_dagster.backends.k8s import kubelet_wire as wire

RESOURCE = "nvidia.com/gpu"
ENDPOINT = "gps-fake-nvidia-gpu.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CDI_ANNOTATION = "cdi.k8s.io/gps-fake-device-plugin"
M = wire.deviceplugin


class DevicePlugin:
    """N fake GPUs (stable UUIDs) served to one kubelet over its device-plugin socket directory."""

    def __init__(
        self, plugin_dir: Path, uuids: Sequence[str], *, cdi_annotations: bool = False
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.uuids = tuple(uuids)
        self.cdi_annotations = cdi_annotations
        self._unhealthy: set[str] = set()
        self._prefer: tuple[str, ...] = ()
        self._changed = threading.Condition()
        self._generation = 0
        self._stopping = False
        self._server: grpc.Server | None = None
        self.allocations: list[tuple[str, ...]] = []

    # -- what a test changes ------------------------------------------------------------------
    def set_unhealthy(self, uuids: Sequence[str]) -> None:
        unknown = set(uuids) - set(self.uuids)
        if unknown:
            raise ValueError(f"unknown GPU(s) {sorted(unknown)}: this plugin has {self.uuids}")
        with self._changed:
            if set(uuids) != self._unhealthy:
                self._unhealthy = set(uuids)
                self._generation += 1
                self._changed.notify_all()

    def set_prefer(self, uuids: Sequence[str]) -> None:
        self._prefer = tuple(u for u in uuids if u in self.uuids)

    def devices(self) -> list[Any]:
        return [
            M["Device"](ID=u, health=UNHEALTHY if u in self._unhealthy else HEALTHY)
            for u in self.uuids
        ]

    # -- the DevicePlugin service ---------------------------------------------------------------
    def get_options(self, _req: Any, _ctx: Any) -> Any:
        return M["DevicePluginOptions"](get_preferred_allocation_available=True)

    def list_and_watch(self, _req: Any, ctx: grpc.ServicerContext) -> Iterator[Any]:
        seen = -1
        while not self._stopping and ctx.is_active():
            with self._changed:
                if seen == self._generation:
                    self._changed.wait(timeout=1.0)
                    continue
                seen = self._generation
                devices = self.devices()
            yield M["ListAndWatchResponse"](devices=devices)

    def preferred(self, req: Any, _ctx: Any) -> Any:
        out = []
        for creq in req.container_requests:
            available = list(creq.available_deviceIDs)
            chosen = list(creq.must_include_deviceIDs)
            order = [u for u in self._prefer if u in available] + available
            for u in order:
                if len(chosen) >= creq.allocation_size:
                    break
                if u not in chosen:
                    chosen.append(u)
            out.append(M["ContainerPreferredAllocationResponse"](deviceIDs=chosen))
        return M["PreferredAllocationResponse"](container_responses=out)

    def allocate(self, req: Any, ctx: grpc.ServicerContext) -> Any:
        out = []
        for creq in req.container_requests:
            ids = tuple(creq.devicesIDs)
            bad = [u for u in ids if u not in self.uuids or u in self._unhealthy]
            if bad:  # NVIDIA's plugin refuses unknown or unhealthy devices the same way
                ctx.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"invalid allocation request: unknown/unhealthy {bad}",
                )
            self.allocations.append(ids)
            resp = M["ContainerAllocateResponse"](envs={VISIBLE_DEVICES: ",".join(ids)})
            if self.cdi_annotations:
                resp.annotations[CDI_ANNOTATION] = ",".join(f"{RESOURCE}={u}" for u in ids)
            out.append(resp)
        return M["AllocateResponse"](container_responses=out)

    def pre_start(self, _req: Any, _ctx: Any) -> Any:
        return M["PreStartContainerResponse"]()

    def _handlers(self) -> grpc.GenericRpcHandler:
        def uu(fn: Any, req: str, resp: str) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=M[req].FromString,
                response_serializer=M[resp].SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            wire.DEVICE_PLUGIN_SERVICE,
            {
                "GetDevicePluginOptions": uu(self.get_options, "Empty", "DevicePluginOptions"),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    request_deserializer=M["Empty"].FromString,
                    response_serializer=M["ListAndWatchResponse"].SerializeToString,
                ),
                "GetPreferredAllocation": uu(
                    self.preferred, "PreferredAllocationRequest", "PreferredAllocationResponse"
                ),
                "Allocate": uu(self.allocate, "AllocateRequest", "AllocateResponse"),
                "PreStartContainer": uu(
                    self.pre_start, "PreStartContainerRequest", "PreStartContainerResponse"
                ),
            },
        )

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        return self.plugin_dir / ENDPOINT

    def serve(self) -> None:
        """Serve on ``<plugin_dir>/<ENDPOINT>`` (a stale socket of an earlier run is replaced)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        server.add_generic_rpc_handlers((self._handlers(),))
        server.add_insecure_port(f"unix:{self.socket}")
        server.start()
        self._server = server

    def register(self, *, timeout_s: float = 10.0) -> None:
        """``Registration.Register`` with the kubelet (raises ``grpc.RpcError`` on refusal)."""
        with grpc.insecure_channel(f"unix:{self.plugin_dir / 'kubelet.sock'}") as ch:
            call = ch.unary_unary(
                wire.REGISTER,
                request_serializer=M["RegisterRequest"].SerializeToString,
                response_deserializer=M["Empty"].FromString,
            )
            call(
                M["RegisterRequest"](
                    version=wire.DEVICE_PLUGIN_VERSION,
                    endpoint=ENDPOINT,
                    resource_name=RESOURCE,
                    options=M["DevicePluginOptions"](get_preferred_allocation_available=True),
                ),
                timeout=timeout_s,
                wait_for_ready=True,
            )

    def stop(self) -> None:
        self._stopping = True
        with self._changed:
            self._changed.notify_all()
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None

    def watch_control(self, path: Path, stop: threading.Event, *, every_s: float = 0.2) -> None:
        """Apply ``path`` (JSON ``unhealthy``/``prefer`` lists) whenever it changes, until
        ``stop``."""
        last: str | None = None
        while not stop.wait(every_s):
            try:
                text = path.read_text()
                doc = json.loads(text)
            except (OSError, ValueError):
                continue  # absent or half-written: read it again next tick
            if text == last:
                continue
            self.set_unhealthy(list(doc.get("unhealthy") or []))
            self.set_prefer(list(doc.get("prefer") or []))
            last = text
            applied = path.with_name(path.name + ".applied")
            tmp = path.with_name(path.name + ".applied.tmp")
            tmp.write_text(text)
            tmp.replace(applied)
