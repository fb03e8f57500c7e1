"""A real, local Kubernetes control plane: etcd + kube-apiserver + controller-manager + scheduler.

Used by ``make test`` (``tools/with_k8s.py``), the Kubernetes demo and ``bench/k8s.py``. The
binaries are Debian bookworm's Kubernetes 1.20 built by ``tools/k8s/build_control_plane.sh``
(cached in ``~/.cache/gps_dagster/k8s/bin``) and Debian's etcd; there is no kubelet: the node
simulator (``nodesim``) plays it. Everything listens on loopback on free ports, never on the
default 10251/10252/10257/10259, so several control planes can run on one machine. Certificates
come from ``openssl``; the API server authenticates a static admin token and authorises with RBAC.

A missing binary is a ``ControlPlaneError`` that names the build script: nothing is skipped.
This module does not import the ``kubernetes`` client; it only runs processes and files.
"""

# Decisions embodied here (docs/decisions.md):
# * “The fake kubelet executes Job pods of the local image”
# * “The test control plane runs only wiring flags, asserted from its running processes”
# * “The transport never waits on its own; an API-server restart is a second API server's”

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BUILD_SCRIPT = "tools/k8s/build_control_plane.sh"
FEATURE_GATES = "--feature-gates=TTLAfterFinished=true"
"""Alpha in 1.20 (beta, on by default, from 1.21): a finished Job with
``ttlSecondsAfterFinished`` is deleted by the TTL controller, as dagster-k8s's run Jobs expect."""
ADMIN_TOKEN_ENV = "GPS_TEST_K8S_TOKEN"
ADMISSION_PLUGINS = "ExtendedResourceToleration"
"""Added to the API server's default admission plugins (NamespaceLifecycle, ServiceAccount,
ResourceQuota, Priority, DefaultTolerationSeconds …, which stay on)."""


class ControlPlaneError(RuntimeError):
    """The control plane could not be found, started or reached (the message says how to fix it)."""


def cache_bin() -> Path:
    root = os.environ.get("GPS_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gps_dagster" / "k8s"
    )
    return Path(root) / "bin"


def binaries() -> dict[str, Path]:
    """The four binaries, or a ``ControlPlaneError`` naming what is missing and how to build it."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        path = cache_bin() / name
        if os.access(path, os.X_OK):
            found[name] = path
        else:
            missing.append(str(path))
    etcd = shutil.which("etcd")
    if etcd is None:
        missing.append("etcd (Debian package etcd-server)")
    else:
        found["etcd"] = Path(etcd)
    if missing:
        raise ControlPlaneError(
            f"control plane binaries missing: {', '.join(missing)}; run `sh {BUILD_SCRIPT}` "
            "(first build ~10 min) or `make test`, which runs it"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ControlPlane:
    """A running control plane; ``kubeconfig`` is an admin kubeconfig for it."""

    root: Path
    port: int
    token: str
    kubeconfig: Path
    ca_file: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_s: float = 0.0
    """Seconds from the first process start to a usable API (readyz + default token)."""

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment a test process needs to reach this control plane."""
        return {"GPS_TEST_KUBECONFIG": str(self.kubeconfig), ADMIN_TOKEN_ENV: self.token}

    def alive(self) -> dict[str, int | None]:
        return {name: p.poll() for name, p in self.processes.items()}

    def stop(self) -> None:
        """SIGTERM every process group, SIGKILL what is left after 5 s, then remove the files."""
        for proc in reversed(list(self.processes.values())):
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait(timeout=5)
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


def start(root: Path | None = None, *, timeout_s: float = 90.0) -> ControlPlane:
    """Start etcd, the API server and both controllers; return once pods can be created."""
    bins = binaries()
    base = root or Path(tempfile.mkdtemp(prefix="gps-k8s-", dir=_fast_tmp()))
    base.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    pki = _certificates(base / "pki")
    token = os.urandom(16).hex()
    (base / "tokens.csv").write_text(f'{token},gps-admin,gps-admin,"system:masters"\n')
    port = free_port()
    plane = ControlPlane(base, port, token, base / "admin.kubeconfig", pki["ca.crt"])
    _write_kubeconfig(plane.kubeconfig, plane.server, pki["ca.crt"], token)
    try:
        etcd_port = _start_etcd(plane, bins["etcd"])
        _start_apiserver(plane, bins["kube-apiserver"], pki, etcd_port)
        _wait_ready(plane, began + timeout_s)
        _start_controllers(plane, bins, pki)
        _wait_default_token(plane, "default", began + timeout_s)
    except BaseException:
        plane.stop()
        raise
    plane.started_s = time.monotonic() - began
    return plane


def _fast_tmp() -> str | None:
    """etcd fsyncs a lot: keep its data in memory when /dev/shm is there."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _run(cmd: list[str], cwd: Path) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, check=False)
    if done.returncode:
        raise ControlPlaneError(
            f"{' '.join(cmd)} failed: {done.stderr.decode(errors='replace')[-400:]}"
        )


def _certificates(pki: Path) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1 and the service-account key pair."""
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl not found; install the Debian package openssl")
    pki.mkdir(parents=True, exist_ok=True)
    (pki / "san.cnf").write_text(
        "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:127.0.0.1,DNS:localhost,"
        "DNS:kubernetes.default.svc\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    steps = [
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=gps-test-ca",
        ],
        [
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kube-apiserver",
        ],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            "-extensions",
            "ext",
        ],
        ["openssl", "genrsa", "-out", "sa.key", "2048"],
        ["openssl", "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
    ]
    for cmd in steps:
        _run(cmd, pki)
    return {name: pki / name for name in ("ca.crt", "server.crt", "server.key", "sa.key", "sa.pub")}


def _write_kubeconfig(path: Path, server: str, ca: Path, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "gps-test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "gps-admin", "user": {"token": token}}],
        "contexts": [{"name": "gps-test", "context": {"cluster": "gps-test", "user": "gps-admin"}}],
        "current-context": "gps-test",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML: any kubeconfig reader takes it


def _spawn(plane: ControlPlane, name: str, cmd: list[str]) -> None:
    log = open(plane.root / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
    plane.processes[name] = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    log.close()


def _start_etcd(plane: ControlPlane, etcd: Path) -> int:
    client, peer = free_port(), free_port()
    _spawn(
        plane,
        "etcd",
        [
            str(etcd),
            "--data-dir",
            str(plane.root / "etcd"),
            "--name",
            "default",
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"default=http://127.0.0.1:{peer}",
            "--snapshot-count",
            "5000",
            "--log-level",
            "warn",
        ],
    )
    return client


APISERVER_ARGV = "kube-apiserver.argv.json"
"""The API server's command line, kept beside its log: ``SecondApiServer`` starts a twin."""


def _start_apiserver(
    plane: ControlPlane, binary: Path, pki: dict[str, Path], etcd_port: int
) -> None:
    argv = [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={plane.port}",
        "--insecure-port=0",
        f"--tls-cert-file={pki['server.crt']}",
        f"--tls-private-key-file={pki['server.key']}",
        f"--client-ca-file={pki['ca.crt']}",
        f"--token-auth-file={plane.root / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        f"--service-account-key-file={pki['sa.pub']}",
        f"--service-account-signing-key-file={pki['sa.key']}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/24",
        "--endpoint-reconciler-type=none",
        # As strict as production (R-K8S-6): API Priority and Fairness on (the 1.20 default:
        # feature gate APIPriorityAndFairness beta, --enable-priority-and-fairness=true; its
        # FlowSchema/PriorityLevelConfiguration are flowcontrol.apiserver.k8s.io/v1beta1),
        # and ExtendedResourceToleration on top of the default plugins, as on GKE: a pod
        # requesting nvidia.com/gpu gets the toleration for the GPU nodes' taint.
        f"--enable-admission-plugins={ADMISSION_PLUGINS}",
        FEATURE_GATES,
        "--v=0",
    ]
    (plane.root / APISERVER_ARGV).write_text(json.dumps(argv))
    _spawn(plane, "kube-apiserver", argv)


class SecondApiServer:
    """A second kube-apiserver on the control plane's etcd, as an HA control plane runs several.

    Same flags, certificates and storage; its own port. A test points a client at it and
    restarts it (SIGKILL, then the same command) without disturbing anything served by the
    first one: controllers, scheduler and other tests keep their server. Every API server of a
    cluster serves the same objects (they share etcd) but keeps its own API Priority and
    Fairness seats, as in production.
    """

    def __init__(self, kubeconfig: Path) -> None:
        self.root = kubeconfig.parent
        self.argv = json.loads((self.root / APISERVER_ARGV).read_text())
        self.port = free_port()
        self.ca_file = self.root / "pki" / "ca.crt"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = 60.0) -> None:
        """Start it (again) and wait for ``/readyz``; raises ``ControlPlaneError`` if it never
        is."""
        argv = [a for a in self.argv if not a.startswith("--secure-port=")]
        self.starts += 1
        log = open(self.root / f"kube-apiserver-{self.port}-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*argv, f"--secure-port={self.port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        token = self._admin_token()
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControlPlaneError(
                    f"the second kube-apiserver exited with {self.proc.returncode}"
                )
            req = urllib.request.Request(
                self.server + "/readyz", headers={"Authorization": f"Bearer {token}"}
            )
            with (
                contextlib.suppress(OSError, ssl.SSLError),
                urllib.request.urlopen(req, context=context, timeout=5) as resp,
            ):
                if resp.status == 200:
                    return
            time.sleep(0.2)
        raise ControlPlaneError(f"the second kube-apiserver was not ready on {self.server} in time")

    def kill(self) -> None:
        """SIGKILL, as a crashed or OOM-killed API server dies: no graceful drain."""
        if self.proc is not None:
            _signal(self.proc, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def _admin_token(self) -> str:
        return (self.root / "tokens.csv").read_text().split(",", 1)[0]


def _start_controllers(plane: ControlPlane, bins: dict[str, Path], pki: dict[str, Path]) -> None:
    kubeconfig = str(plane.kubeconfig)
    _spawn(
        plane,
        "kube-controller-manager",
        [
            str(bins["kube-controller-manager"]),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            f"--service-account-private-key-file={pki['sa.key']}",
            f"--root-ca-file={pki['ca.crt']}",
            "--secure-port=0",
            f"--port={free_port()}",
            FEATURE_GATES,  # default syncs (5 deployment / 5 replicaset workers) and QPS (20)
            "--v=0",
        ],
    )
    config = plane.root / "scheduler.yaml"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": kubeconfig},  # default QPS 50 / burst 100
                "leaderElection": {"leaderElect": False},
                "healthzBindAddress": f"127.0.0.1:{free_port()}",
                "metricsBindAddress": f"127.0.0.1:{free_port()}",
                # default backoffs (podInitialBackoffSeconds 1, podMaxBackoffSeconds 10)
            }
        )
    )
    _spawn(
        plane,
        "kube-scheduler",
        [
            str(bins["kube-scheduler"]),
            f"--config={config}",
            "--secure-port=0",
            "--v=0",
        ],
    )


def _request(plane: ControlPlane, path: str) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    req = urllib.request.Request(
        plane.server + path, headers={"Authorization": f"Bearer {plane.token}"}
    )
    try:
        with urllib.request.urlopen(req, context=context, timeout=5) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()
    except (OSError, ssl.SSLError):
        return 0, b""


def _dead(plane: ControlPlane) -> None:
    for name, code in plane.alive().items():
        if code is not None:
            tail = (plane.root / f"{name}.log").read_text(errors="replace")[-1500:]
            raise ControlPlaneError(f"{name} exited with {code}:\n{tail}")


def _wait_ready(plane: ControlPlane, deadline: float) -> None:
    while time.monotonic() < deadline:
        _dead(plane)
        if _request(plane, "/readyz")[0] == 200:
            return
        time.sleep(0.2)
    raise ControlPlaneError(
        f"kube-apiserver not ready on {plane.server} in time (logs in {plane.root})"
    )


def _wait_default_token(plane: ControlPlane, namespace: str, deadline: float) -> None:
    """Kubernetes 1.20 refuses pods in a namespace until its ``default-token-*`` Secret exists."""
    while time.monotonic() < deadline:
        _dead(plane)
        status, body = _request(plane, f"/api/v1/namespaces/{namespace}/secrets")
        if status == 200:
            items = json.loads(body).get("items", [])
            if any(i["metadata"]["name"].startswith("default-token-") for i in items):
                return
        time.sleep(0.2)
    raise ControlPlaneError(
        f"no default-token Secret in namespace {namespace} in time (logs in {plane.root})"
    )
