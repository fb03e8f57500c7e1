"""One real Kubernetes node for the test cluster: containerd + the kubelet + a fake GPU plugin.

Test support (R-K8S-5: the witness from a real source). Only the GPUs are fake (``deviceplugin``, on
the kubelet's real device-plugin API); pods are run by the real kubelet 1.20
(``tools/k8s/build_node.sh`` builds it next to the control plane) through containerd 1.6 and runc
from Debian, so probes, graceful termination, crash loops, device allocation and the PodResources
API are the real ones.

Layout: everything lives under the run's temp dir. The kubelet's device-plugin directory is fixed
at ``/var/lib/kubelet/device-plugins`` (``pkg/kubelet/cm/devicemanager/manager.go``,
``NewManagerImpl`` uses ``pluginapi.KubeletSocket``), so a holder process owns a private mount
namespace in which ``<root>/kubelet`` is bind-mounted on ``/var/lib/kubelet``; containerd and the
kubelet are started in it with ``nsenter``. Parallel runs therefore never share kubelet state.
Pod cgroups go under a per-run ``--cgroup-root`` (cgroup v1, ``cgroupfs`` driver), the pod network
is a per-run CNI bridge (Debian's containernetworking-plugins; containerd reports NetworkReady
only with a CNI config, and the kubelet keeps the node NotReady without it). ``stop`` kills the
kubelet, containerd, the shims and every process left in the run's pod cgroups, removes the
cgroups and the bridge, then the files.

A missing prerequisite is a ``NodeError`` that names what to install or run: nothing is skipped.
"""

# Decisions embodied here (docs/decisions.md):
# * “One real node, in a private mount namespace, on the pod network of a per-run bridge”

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gps_dagster.testing.k8s.deviceplugin import DevicePlugin

BUILD_SCRIPT = "tools/k8s/build_node.sh"
PAUSE_IMAGE = "localhost/gps/pause:3.4"
STANDIN_IMAGE = "localhost/gps/standin:1"
NODE_NAME = "gps-real-node-0"
REAL_NODE_LABEL = "gps.dagster.io/real-node"
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
"""Registered with the node: only pods that tolerate it (the real-node tests) land there, so the
other tests' pods, which share the cluster, never take its GPUs."""
REAL_NODE_TOLERATION = {
    "key": REAL_NODE_LABEL,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
CGROUP_V1 = Path("/sys/fs/cgroup")


class NodeError(RuntimeError):
    """The real node could not be prepared or started (the message says how to fix it)."""


@dataclass
class RealNode:
    """A running node; ``control_file`` steers its fake GPUs (see ``deviceplugin``)."""

    root: Path
    name: str
    uuids: tuple[str, ...]
    cgroup_root: str
    bridge: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    plugin: DevicePlugin | None = None
    started_s: float = 0.0
    _stop_control: threading.Event = field(default_factory=threading.Event)

    @property
    def kubelet_dir(self) -> Path:
        """The host path of the node's ``/var/lib/kubelet`` (pod-resources socket included)."""
        return self.root / "kubelet"

    @property
    def control_file(self) -> Path:
        return self.root / "gpus.json"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    def env(self) -> dict[str, str]:
        return {
            "GPS_TEST_REAL_NODE": self.name,
            "GPS_TEST_REAL_NODE_DIR": str(self.root),
            "GPS_TEST_REAL_NODE_GPUS": ",".join(self.uuids),
        }

    def stop(self) -> None:
        self._stop_control.set()
        if self.plugin is not None:
            self.plugin.stop()
        for name in ("kubelet", "containerd"):
            proc = self.processes.get(name)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        _kill_matching(str(self.containerd_socket))  # containerd-shim-runc-v2 of this node
        _kill_cgroup_tree(self.cgroup_root)
        holder = self.processes.get("holder")
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait(timeout=5)
        self.processes.clear()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        _remove_cgroups(self.cgroup_root)
        shutil.rmtree(self.root, ignore_errors=True)


def gpu_uuids(n: int, *, node: str = NODE_NAME) -> tuple[str, ...]:
    """``n`` stable NVIDIA-style UUIDs (``GPU-<uuid>``) derived from the node name."""
    import uuid

    return tuple(f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{i}')}" for i in range(n))


def cache() -> Path:
    root = os.environ.get("GPS_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gps_dagster" / "k8s"
    )
    return Path(root)


def prerequisites() -> dict[str, Path]:
    """Every binary and image archive the node needs, or a ``NodeError`` naming the fix."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in ("containerd", "ctr", "runc", "unshare", "nsenter", "ip", "mount"):
        which = shutil.which(name)
        if which is None:
            missing.append(name)
        else:
            found[name] = Path(which)
    for name, path in (
        ("kubelet", cache() / "bin" / "kubelet"),
        ("bridge", Path("/usr/lib/cni/bridge")),
        ("host-local", Path("/usr/lib/cni/host-local")),
        ("loopback", Path("/usr/lib/cni/loopback")),
        ("pause.tar", cache() / "images" / "pause.tar"),
        ("standin.tar", cache() / "images" / "standin.tar"),
    ):
        if path.exists():
            found[name] = path
        else:
            missing.append(str(path))
    if os.geteuid() != 0:
        missing.append("root (the kubelet and containerd need it)")
    if missing:
        raise NodeError(
            f"real node prerequisites missing: {', '.join(missing)}; run `bash {BUILD_SCRIPT}` "
            "(installs containerd, runc, CNI plugins, busybox-static; builds the kubelet and "
            "images)"
        )
    return found


def start(
    root: Path, kubeconfig: Path, *, uuids: tuple[str, ...], timeout_s: float = 120.0
) -> RealNode:
    """Start containerd, the kubelet and the device plugin; return once the node is Ready."""
    found = prerequisites()
    began = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid() % 4096:x}"
    node = RealNode(root, NODE_NAME, uuids, f"/gps-node-{tag}", f"gpsbr{tag}")
    try:
        _layout(node)
        _holder(node)
        _containerd(node, found)
        _import_images(node, found)
        _make_cgroups(node.cgroup_root)
        _kubelet(node, found, kubeconfig)
        _plugin(node, deadline=began + timeout_s)
        _wait_node(node, kubeconfig, deadline=began + timeout_s)
    except BaseException:
        node.stop()
        raise
    node.started_s = time.monotonic() - began
    return node


def _layout(node: RealNode) -> None:
    for sub in (
        "kubelet/device-plugins",
        "containerd/root",
        "containerd/state",
        "cni",
        "opt",
        "plugins",
    ):
        (node.root / sub).mkdir(parents=True, exist_ok=True)
    Path("/var/lib/kubelet").mkdir(
        parents=True, exist_ok=True
    )  # the mount point (empty on the host)
    octet = 100 + (os.getpid() % 150)
    (node.root / "cni" / "10-gps.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": f"gps-{node.bridge}",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": node.bridge,
                        "isGateway": True,
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": f"10.{octet}.0.0/24"}]],
                            "dataDir": str(node.root / "cni" / "ipam"),
                        },
                    },
                    {"type": "loopback"},
                ],
            }
        )
    )


def _spawn(node: RealNode, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
    log = open(node.root / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    log.close()
    node.processes[name] = proc
    return proc


def _in_ns(node: RealNode, cmd: list[str]) -> list[str]:
    return ["nsenter", f"--mount=/proc/{node.processes['holder'].pid}/ns/mnt", "--", *cmd]


def _holder(node: RealNode) -> None:
    """A process that owns the node's mount namespace, with ``/var/lib/kubelet`` bound in it."""
    script = f"mount --bind {node.kubelet_dir} /var/lib/kubelet && echo bound && exec sleep 1000000"
    proc = _spawn(
        node, "holder", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    )
    deadline = time.monotonic() + 10
    while b"bound" not in (node.root / "holder.log").read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise NodeError(
                "could not bind /var/lib/kubelet in a private mount namespace: "
                + (node.root / "holder.log").read_text(errors="replace")[-300:]
            )
        time.sleep(0.05)


def _containerd(node: RealNode, found: dict[str, Path]) -> None:
    c = node.root / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    (c / "config.toml").write_text(
        f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{node.containerd_socket}"
[ttrpc]
  address = "{c / "ttrpc.sock"}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{node.root / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{node.root / "cni"}"
"""
    )
    proc = _spawn(
        node,
        "containerd",
        _in_ns(node, [str(found["containerd"]), "--config", str(c / "config.toml")]),
    )
    deadline = time.monotonic() + 30
    while not node.containerd_socket.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise NodeError("containerd did not start: " + _tail(node, "containerd"))
        time.sleep(0.1)


def _import_images(node: RealNode, found: dict[str, Path]) -> None:
    for archive in ("pause.tar", "standin.tar"):
        done = subprocess.run(
            [str(found["ctr"]), "--address", str(node.containerd_socket), "-n", "k8s.io",
             "images", "import", str(found[archive].resolve())],
            capture_output=True, check=False, timeout=120,
        )  # fmt: skip
        if done.returncode:
            raise NodeError(
                f"ctr images import {archive} failed: {done.stderr.decode(errors='replace')[-300:]}"
            )


def _subsystems(*, unified: bool = False) -> list[Path]:
    """The v1 hierarchies (and, for cleanup, the hybrid ``unified`` one runc also writes to)."""
    return [
        p for p in sorted(CGROUP_V1.iterdir())
        if (unified or p.name != "unified") and (p / "cgroup.procs").exists()
    ]  # fmt: skip


def _make_cgroups(cgroup_root: str) -> None:
    """The kubelet refuses a ``--cgroup-root`` that does not exist in every subsystem."""
    if not (CGROUP_V1 / "memory" / "cgroup.procs").exists():
        raise NodeError(
            f"cgroup v1 hierarchy not found under {CGROUP_V1}: the test node uses the cgroupfs "
            "driver on v1"
        )
    for sub in _subsystems():
        (sub / cgroup_root.lstrip("/")).mkdir(exist_ok=True)


def _kubelet(node: RealNode, found: dict[str, Path], kubeconfig: Path) -> None:
    from gps_dagster.testing.k8s.controlplane import free_port

    labels = f"{REAL_NODE_LABEL}=true,nvidia.com/gpu.product=H100-80GB,nvidia.com/gpu.memory=81559"
    cmd = [
        str(found["kubelet"]),
        f"--kubeconfig={kubeconfig}",
        "--root-dir=/var/lib/kubelet",
        "--container-runtime=remote",
        f"--container-runtime-endpoint=unix://{node.containerd_socket}",
        "--runtime-request-timeout=2m",
        "--cgroup-driver=cgroupfs",
        f"--cgroup-root={node.cgroup_root}",
        "--fail-swap-on=false",
        f"--pod-infra-container-image={PAUSE_IMAGE}",
        f"--hostname-override={node.name}",
        "--node-ip=127.0.0.1",
        "--address=127.0.0.1",
        f"--port={free_port()}",
        "--read-only-port=0",
        f"--healthz-port={free_port()}",
        "--healthz-bind-address=127.0.0.1",
        f"--node-labels={labels}",
        f"--register-with-taints={REAL_NODE_LABEL}=true:NoSchedule",
        "--eviction-hard=memory.available<64Mi,nodefs.available<1%,imagefs.available<1%",
        "--image-gc-high-threshold=100",
        "--image-gc-low-threshold=99",
        f"--volume-plugin-dir={node.root / 'plugins'}",
        "--cluster-domain=cluster.local",
        "--v=2",
    ]
    _spawn(node, "kubelet", _in_ns(node, cmd))


def _plugin(node: RealNode, *, deadline: float) -> None:
    plugin_dir = node.kubelet_dir / "device-plugins"
    while not (plugin_dir / "kubelet.sock").exists():
        if node.processes["kubelet"].poll() is not None or time.monotonic() > deadline:
            raise NodeError(
                "the kubelet did not open its device-plugin socket: " + _tail(node, "kubelet")
            )
        time.sleep(0.2)
    node.plugin = DevicePlugin(plugin_dir, node.uuids)
    node.plugin.serve()
    node.plugin.register()
    threading.Thread(
        target=node.plugin.watch_control, args=(node.control_file, node._stop_control), daemon=True
    ).start()


def _wait_node(node: RealNode, kubeconfig: Path, *, deadline: float) -> None:
    """Ready, untainted, and advertising every GPU (the plugin's ListAndWatch reached it)."""
    from gps_dagster.backends.k8s import Kube, connect

    kube = Kube(connect(str(kubeconfig), None))
    last = "not registered"
    while time.monotonic() < deadline:
        if node.processes["kubelet"].poll() is not None:
            raise NodeError("the kubelet exited: " + _tail(node, "kubelet"))
        try:
            obj = kube.core.read_node(node.name)
        except Exception as exc:
            last = f"not registered ({type(exc).__name__})"
            time.sleep(0.5)
            continue
        ready = [c for c in obj.status.conditions or [] if c.type == "Ready"]
        gpus = (obj.status.allocatable or {}).get("nvidia.com/gpu")
        taints = [t.key for t in obj.spec.taints or [] if t.key != REAL_NODE_LABEL]
        if ready and ready[0].status == "True" and gpus == str(len(node.uuids)) and not taints:
            return
        last = (
            f"Ready={ready[0].status if ready else '?'} ({ready[0].message if ready else ''}), "
            f"gpu={gpus}, taints={taints}"
        )
        time.sleep(0.5)
    raise NodeError(
        f"node {node.name} not usable in time: {last}; kubelet log: " + _tail(node, "kubelet")
    )


def _tail(node: RealNode, name: str) -> str:
    try:
        return (node.root / f"{name}.log").read_text(errors="replace")[-1500:]
    except OSError:
        return "(no log)"


def _kill_matching(needle: str) -> None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and int(proc.name) != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)


def _kill_cgroup_tree(cgroup_root: str) -> None:
    top = CGROUP_V1 / "pids" / cgroup_root.lstrip("/")
    if not top.exists():
        return
    for _ in range(3):
        pids = [int(p) for f in top.rglob("cgroup.procs") for p in f.read_text().split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _remove_cgroups(cgroup_root: str) -> None:
    for sub in _subsystems(unified=True):
        top = sub / cgroup_root.lstrip("/")
        if not top.exists():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
