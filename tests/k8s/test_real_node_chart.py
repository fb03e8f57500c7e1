"""The chart on the real node: the product image in containerd, its pods run by the real kubelet.

The product image ``make image`` built (buildah, this tree's inputs hash) is pushed to an OCI
archive once and imported into the real node's containerd (no registry is reachable). The chart
is installed with ``helm install --wait`` pinned to the real node (its name, its taint
tolerated), with ``hostNetwork`` on: the API server and PostgreSQL of the test listen on
loopback, which a pod on the node's per-run CNI bridge cannot reach, and the API server's
certificate names 127.0.0.1 only. The kubelet's service variables would point a pod at the
``kubernetes`` Service's ClusterIP, which nothing routes here; a container's own ``env`` wins over
them (kubelet ``makeEnvironmentVariables``, pkg/kubelet/kubelet_pods.go: the declared variables
first, "3. Add remaining service environment vars" only for names not declared), so
``gps.env`` sets ``KUBERNETES_SERVICE_HOST=127.0.0.1`` and the API server's port, and
``load_incluster_config`` reads them with the mounted token.

1. The engine, the API and the code location run on the real node as UID 10001 with a read-only
   root (the OCI spec containerd handed runc, and the running process's credentials) and become
   Ready through their own probes, run by the kubelet.
2. A transition run is a Job the ``K8sRunLauncher`` creates (``dagster-daemon`` on this machine
   stands for the chart's daemon, whose workspace names the code location's Service: no cluster
   DNS runs here; its launcher acts as the chart's run-launcher ServiceAccount through a
   kubeconfig); the Job's pod runs ``dagster api execute_run`` in a container on the real node
   with in-cluster config and the runs ServiceAccount's mounted token, and its ops scale the
   pool's Deployments.
"""

# Decisions embodied here (docs/decisions.md):
# * “The chart on the real node runs on the host network”
# * “The product image reaches the real node as an OCI archive, once per tree”

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gps_dagster.backends.k8s import Kube, connect, ledger
from gps_dagster.backends.k8s.workloads import read
from gps_dagster.clocks import VirtualClock
from gps_dagster.dagster_defs import names as dnames
from gps_dagster.demo.devserver import free_port
from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.store import Store
from gps_dagster.testing.k8s import realnode
from gps_dagster.testing.k8s.hosts import service_account_kubeconfig
from gps_dagster.testing.k8s.pools import ClusterPool
from tests.helm.chart_cluster import ChartRelease
from tests.helm.helm_support import REPO
from tests.helm.jobs_world import SCHEDULE, A, B, schedule

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

UID = 10001
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
COMPONENTS = ("engine", "api", "code-location")
T0 = datetime(2026, 10, 19, 8, tzinfo=UTC)
"""The instant of the test's own records (the fake GPU node's clock, the store's ``now``): the
pods on the real node read the wall clock, so the swap window is open over a whole century."""
WINDOW = (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))


def pool_text(node: str) -> str:
    """A (8 GPUs, stopped) and B (8, running) on one fake 8-GPU node; every delay 0, so the fake
    kubelet acts at its next sync whatever its (virtual, unmoving) clock says."""
    return f"""
name: real-chart-pool
nodes:
  - {{name: {node}, gpus: 8, flavor: H100-80GB, region: r1}}
deploys:
  - {{id: {A}, kind: deployment, gpus_per_replica: 8, state: stopped}}
  - {{id: {B}, kind: deployment, gpus_per_replica: 8, state: running}}
sim:
  timings: {{stop_grace_s: 0, publish_lag_s: 0, start_delay_s: 0}}
"""


@dataclass
class RealNode:
    name: str
    root: Path

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"


@pytest.fixture(scope="module")
def node(k8s_cluster: str) -> Iterator[RealNode]:
    name = os.environ.get("GPS_TEST_REAL_NODE")
    if name:
        yield RealNode(name, Path(os.environ["GPS_TEST_REAL_NODE_DIR"]))
        return
    root = Path(k8s_cluster).parent / f"node-{os.getpid()}"
    started = realnode.start(root, Path(k8s_cluster), uuids=realnode.gpu_uuids(4))
    try:
        yield RealNode(started.name, started.root)
    finally:
        started.stop()


def import_archive(socket: Path, archive: Path, *, timeout_s: float = 600) -> None:
    """Load an OCI archive into the node's containerd, in the namespace its CRI plugin reads
    (``k8s.io``), as ``realnode`` loads the pause image: no registry is reachable, this is the
    pull."""
    done = subprocess.run(["ctr", "--address", str(socket), "-n", "k8s.io", "images", "import",
                           str(archive)],
                          capture_output=True, text=True, check=False,
                          timeout=timeout_s)  # fmt: skip
    assert done.returncode == 0, f"ctr images import {archive.name}: {done.stderr[-1000:]}"


def container_record(socket: Path, container_id: str) -> dict[str, Any]:
    """What containerd holds for a CRI container (``ctr containers info``: the OCI spec runc ran
    it with) and the PID of its task (0 once it exited)."""
    base = ["ctr", "--address", str(socket), "-n", "k8s.io"]
    info = subprocess.run([*base, "containers", "info", container_id],
                          capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    record: dict[str, Any] = json.loads(info.stdout)
    tasks = subprocess.run(
        [*base, "tasks", "ls"], capture_output=True, text=True, check=True, timeout=30
    )
    pids = [
        line.split()[1]
        for line in tasks.stdout.splitlines()[1:]
        if line.split()[:1] == [container_id]
    ]
    record["pid"] = int(pids[0]) if pids else 0
    return record


def _image_cache() -> Path:
    return Path(
        os.environ.get("GPS_IMAGE_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "gps_dagster"
        / "image"
    )


def _inputs_hash() -> str:
    spec = importlib.util.spec_from_file_location(
        "build_image", REPO / "tools/image/build_image.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.inputs_hash())


@pytest.fixture(scope="module")
def image(node: RealNode) -> str:
    """This tree's product image (``make image``), imported into the real node's containerd."""
    tag = f"0.1.0-{_inputs_hash()}"
    ref = f"localhost/gps-dagster:{tag}"
    cache = _image_cache()
    archive = cache / f"gps-dagster-{tag}.oci.tar"
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # no build or prune while we read the image
        if not archive.exists():
            partial = archive.with_suffix(f".{os.getpid()}.partial")
            done = subprocess.run(
                ["buildah", "--storage-driver", "vfs", "push", "-q", ref,
                 f"oci-archive:{partial}:{ref}"],
                capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
            assert done.returncode == 0, (
                f"{ref} missing? run `make image` first:\n{done.stderr[-2000:]}"
            )
            partial.replace(archive)
    import_archive(node.socket, archive, timeout_s=600)
    return ref


class UnixToTcp:
    """127.0.0.1:<port> forwarded to the test PostgreSQL's Unix socket: the embedded server
    listens on no TCP address (``-h ""``) and a container has its own ``/tmp``, so the pods reach
    the database through this port of the host network (the server sees socket connections)."""

    def __init__(self, socket_path: str) -> None:
        import socketserver

        target = socket_path

        class Pipe(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                import socket as s

                with s.socket(s.AF_UNIX, s.SOCK_STREAM) as upstream:
                    upstream.connect(target)
                    back = threading.Thread(
                        target=_copy, args=(upstream, self.request), daemon=True
                    )
                    back.start()
                    _copy(self.request, upstream)
                    back.join(timeout=5)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Pipe)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _copy(src: Any, dst: Any) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(1)  # SHUT_WR: the other direction keeps flowing until its own end


def _tcp_url(socket_url: str, port: int) -> str:
    """The same database by TCP on the forwarder (the test URL names its socket in ``?host=``)."""
    base, _, query = socket_url.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    params.pop("host", None)
    user_part, _, database = base.removeprefix("postgresql+psycopg2://").partition("/")
    rest = "&".join(f"{k}={v}" for k, v in params.items() if k != "port")
    return f"postgresql+psycopg2://{user_part.rstrip('@')}@127.0.0.1:{port}/{database}" + (
        f"?{rest}" if rest else ""
    )


def _socket_path(socket_url: str) -> str:
    params = dict(p.split("=", 1) for p in socket_url.partition("?")[2].split("&") if p)
    return f"{params['host']}/.s.PGSQL.{params.get('port', '5432')}"


@dataclass
class World:
    release: ChartRelease
    pool: ClusterPool
    node: RealNode
    store: Store
    home: Path
    grpc_port: int


@pytest.fixture(scope="module")
def world(
    k8s_cluster: str,
    node: RealNode,
    image: str,
    pg_server_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    root = tmp_path_factory.mktemp("real-chart")
    pg_url = _fresh_database(pg_server_url)
    forward = UnixToTcp(_socket_path(pg_server_url))
    pod_pg_url = _tcp_url(pg_url, forward.port)
    clock = VirtualClock(T0)
    suffix = uuid.uuid4().hex[:6]
    pool = ClusterPool(Kube(connect(k8s_cluster, None)), clock,
                       parse_pool(pool_text(f"rc-{suffix}-gpu")),
                       prefix=f"rc{suffix}")  # fmt: skip
    placement = {"nodeSelector": {"kubernetes.io/hostname": node.name},
                 "tolerations": [realnode.REAL_NODE_TOLERATION]}  # fmt: skip
    release = ChartRelease(
        k8s_cluster, pod_pg_url, root, clock=clock, scope=(), placement=placement
    )
    store = Store.open(pg_url)
    driver = None
    try:
        pool.create()
        driver = pool.drive(every_s=0.2)
        release.scope = pool.namespaces
        release.start()
        repository, _, tag = image.rpartition(":")
        host, port = release.cluster.server.removeprefix("https://").rsplit(":", 1)
        values = release.values(
            image={"repository": repository, "tag": tag, "pullPolicy": "Never"},
            hostNetwork=True,
            gps={
                "env": [
                    {"name": "KUBERNETES_SERVICE_HOST", "value": host},
                    {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                ]
            },
            dagsterWebserver={"enabled": False},  # its role: the daemon below (no cluster DNS)
            dagsterDaemon={"enabled": False},
            engine={"replicaCount": 1},  # host network: one replica per port and node
            api={"replicaCount": 1},
            codeLocation={"reconcileIntervalSeconds": 5},
            metrics={"codeLocationPort": free_port()},  # the engine binds metrics.port on the node
            runs={**placement, "ttlSecondsAfterFinished": 600},
            runLauncher={"config": {"k8sRunLauncher": {"imagePullPolicy": "Never"}}},
        )
        done = release.install(values, timeout="420s", check=False)
        assert done.returncode == 0, (
            f"helm install: {done.stderr[-1500:]}\n{_pod_logs(release.namespace)}"
        )
        yield World(release, pool, node, store, root, release.ports["grpc"])
    finally:
        with contextlib.suppress(Exception):
            release.close()
        if driver is not None:
            driver.stop()
        pool.close()
        store.engine.dispose()
        forward.close()
        _drop_database(pg_server_url, pg_url)


def _fresh_database(server_url: str) -> str:
    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    base, _, query = server_url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def _drop_database(server_url: str, url: str) -> None:
    import sqlalchemy as sa

    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(
            sa.text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1].split("?")[0]}" WITH (FORCE)')
        )
    admin.dispose()


def _wait(
    what: str, check: Callable[[], Any], *, timeout_s: float, explain: Callable[[], str] = str
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, (
            f"timed out after {timeout_s:.0f} s waiting for {what}\n{explain()}"
        )
        time.sleep(1)


def _runtime(node: RealNode, status: dict[str, Any]) -> dict[str, Any]:
    runtime, _, cid = status["containerID"].partition("://")
    assert runtime == "containerd", status["containerID"]  # a real container, not a fake's process
    return container_record(node.socket, cid)


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_chart_pods_run_on_the_real_node_as_10001_read_only_and_ready_by_their_probes(
    world: World,
) -> None:
    for component in COMPONENTS:
        pods = world.release.pods(component)
        assert len(pods) == 1, (component, [p["metadata"]["name"] for p in pods])
        pod = pods[0]
        assert pod["spec"]["nodeName"] == world.node.name, component
        assert pod["spec"]["hostNetwork"] is True
        conditions = {c["type"]: c for c in pod["status"]["conditions"]}
        assert conditions["Ready"]["status"] == "True", component
        status = pod["status"]["containerStatuses"][0]
        started = status["state"]["running"]["startedAt"]
        # Ready strictly after the process started: the kubelet waited for the probe's first success
        assert conditions["Ready"]["lastTransitionTime"] > started, (
            component,
            started,
            conditions["Ready"],
        )
        assert status["restartCount"] == 0, component
        record = _runtime(world.node, status)
        spec = record["Spec"]
        assert spec["process"]["user"]["uid"] == UID, component
        assert spec["root"]["readonly"] is True, component
        assert record["pid"] and _uid_of(int(record["pid"])) == UID, component
        container = pod["spec"]["containers"][0]
        probes = [p for p in ("startupProbe", "readinessProbe") if p in container]
        assert probes, component  # Ready was gated by a probe of the chart's, not by start alone
    api = world.release.pods("api")[0]["metadata"]
    access_log = (
        Path("/var/log/pods")
        / f"{world.release.namespace}_{api['name']}_{api['uid']}"
        / "api"
        / "0.log"
    )
    # before this test touched it, the API's own log (written by the kubelet) shows the probes
    assert '"GET /healthz HTTP/1.1" 200' in access_log.read_text(errors="replace")
    web_ports = {c: world.release.ports[k] for c, k in (("engine", "metrics"), ("api", "api"))}
    import urllib.request

    for component, port in web_ports.items():  # what the kubelet probed answers on the node
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
            assert answer.status == 200, component


def test_a_transition_run_is_a_k8s_run_launcher_job_in_a_container_on_the_real_node(
    world: World,
) -> None:
    release, kube = world.release, world.release.kube
    # the engine would swap A and B itself: only the Dagster run may act in this test
    kube.merge_patch(kube.apps.patch_namespaced_deployment, f"{release.fullname}-engine",
                     release.namespace, body={"spec": {"replicas": 0}},
                     what="engine off")  # fmt: skip
    _wait("the engine's pod gone", lambda: not release.pods("engine"), timeout_s=90)
    launcher = service_account_kubeconfig(kube, release.namespace,
                                          f"{release.fullname}-run-launcher",
                                          world.home / "run-launcher.kubeconfig",
                                          cluster=release.cluster)  # fmt: skip
    home = world.home / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(_daemon_instance(release, launcher))
    workspace = world.home / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {
                        "grpc_server": {
                            "host": "127.0.0.1",
                            "port": world.grpc_port,
                            "location_name": "gps_dagster",
                        }
                    }
                ]
            }
        )
    )
    world.store.apply_schedule(parse_schedule(json.dumps(schedule(*WINDOW))), now=T0)
    world.store.set_gate("enforce", now=T0)
    log = world.home / "daemon.log"
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_PG_URL": release.db_url}
    with log.open("wb") as out:  # the child keeps its own descriptor
        daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(workspace)],
            cwd=world.home,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        pod = _wait("a run Job's pod that succeeded", lambda: _finished_run_pod(world),
                    timeout_s=420, explain=lambda: _explain(world, log))  # fmt: skip
    finally:
        os.killpg(daemon.pid, 15)
        daemon.wait(timeout=30)
    spec = pod["spec"]
    assert spec["nodeName"] == world.node.name and spec["hostNetwork"] is True
    assert spec["serviceAccountName"] == f"{release.fullname}-runs"
    owners = pod["metadata"]["ownerReferences"]
    assert [o["kind"] for o in owners] == ["Job"]
    c = spec["containers"][0]
    assert c["args"][:3] == ["dagster", "api", "execute_run"] or c.get("command", [])[:3] == [
        "dagster",
        "api",
        "execute_run",
    ], c
    env = {e["name"]: e.get("value") for e in c.get("env") or []}
    assert "KUBECONFIG" not in env and "GPS_KUBECONFIG" not in env  # in-cluster config only
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert any(m["mountPath"] == SA_DIR for m in c["volumeMounts"])  # the token the kubelet mounted
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 0
    record = _runtime(world.node, status)  # runc ran it: its spec mounted the token, as 10001
    assert record["Spec"]["process"]["user"]["uid"] == UID
    assert SA_DIR in {m["destination"] for m in record["Spec"]["mounts"]}
    # its release and acquire ops reached the API server and scaled the pool's Deployments
    assert _replicas(world, B) == 0 and _replicas(world, A) == 1
    kind, ns, name = world.pool.workloads[B]
    assert [e.kind for e in ledger.read(read(world.pool.kube, kind, ns, name)).entries][
        -1
    ] == "stop"
    runs = _runs(home, env_pg=release.db_url)
    assert ("SUCCESS", dnames.TRANSITION_JOB) in runs


def _daemon_instance(release: ChartRelease, launcher: Path) -> str:
    """The installed dagster.yaml, its launcher reaching the cluster from outside (a kubeconfig of
    the run-launcher ServiceAccount): the run pods keep the chart's in-cluster file."""
    cm = release.kube.call(release.kube.core.read_namespaced_config_map,
                           f"{release.fullname}-instance",
                           release.namespace, what="instance configmap")  # fmt: skip
    doc = yaml.safe_load(cm["data"]["dagster.yaml"])
    config = doc["run_launcher"]["config"]
    assert config["load_incluster_config"] is True  # what the run pods read
    config.update(load_incluster_config=False, kubeconfig_file=str(launcher))
    return str(yaml.safe_dump(doc))


def _run_pods(world: World) -> list[dict[str, Any]]:
    kube = world.release.kube
    return kube.items(kube.core.list_namespaced_pod, world.release.namespace,
                      label_selector="app.kubernetes.io/component=run_worker",
                      what="run pods")  # fmt: skip


def _finished_run_pod(world: World) -> dict[str, Any] | None:
    for pod in _run_pods(world):
        if pod["status"].get("phase") == "Succeeded":
            return pod
        assert pod["status"].get("phase") != "Failed", _explain(world, None)
    return None


def _replicas(world: World, deploy: str) -> int:
    _, ns, name = world.pool.workloads[deploy]
    obj = world.pool.kube.call(
        world.pool.kube.apps.read_namespaced_deployment, name, ns, what="deployment"
    )
    return int(obj["spec"].get("replicas") or 0)


def _runs(home: Path, *, env_pg: str) -> set[tuple[str, str]]:
    """(status, job) of the schedule's runs in the instance, read by a child with the daemon's
    DAGSTER_HOME (the instance's run storage is the release's PostgreSQL database)."""
    code = ("from dagster import DagsterInstance, RunsFilter; i = DagsterInstance.get(); "
            f"runs = i.get_runs(filters=RunsFilter(tags={{{dnames.TAG_SCHEDULE!r}: "
            f"{SCHEDULE!r}}})); "
            "print('\\n'.join(f'{r.status.value} {r.job_name}' for r in runs))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True,
                          env={**os.environ, "DAGSTER_HOME": str(home),
                               "DAGSTER_PG_URL": env_pg})  # fmt: skip
    return {(s, j) for s, j in (line.split() for line in done.stdout.splitlines() if line.strip())}


def _pod_logs(namespace: str) -> str:
    """The containers' logs the kubelet wrote for the namespace (``/var/log/pods``, on this
    host)."""
    out = []
    for path in sorted(Path("/var/log/pods").glob(f"{namespace}_*/*/*.log")):
        out.append(
            f"--- {path.relative_to('/var/log/pods')}\n{path.read_text(errors='replace')[-2500:]}"
        )
    return "\n".join(out) or f"(no container logs under /var/log/pods for {namespace})"


def _explain(world: World, log: Path | None) -> str:
    lines = []
    for pod in _run_pods(world):
        name = pod["metadata"]["name"]
        lines.append(f"--- {name}: {json.dumps(pod['status'])[:1500]}")
    lines.append(_pod_logs(world.release.namespace))
    if log is not None and log.exists():
        lines.append("--- daemon\n" + log.read_text(errors="replace")[-3000:])
    return "\n".join(lines)
