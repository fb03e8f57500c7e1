"""The real node (issue 19): pods run by the real kubelet 1.20 + containerd, GPUs from the fake
device plugin on the real deviceplugin/v1beta1 API, the witness from the kubelet's PodResources.

``make test`` starts the node with the control plane (``tools/with_k8s.py``:
``GPS_TEST_REAL_NODE``); run alone, this module starts one itself. A missing prerequisite fails
(``NodeError``), never skips. All tests of this module share the node's 4 GPUs, so they live in
one file (``--dist loadfile``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gps_dagster.backends.k8s import K8sCore, Kube, connect, names, nodeagent
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.gps.reservations import ReservationSpec, SharingMode
from gps_dagster.domain.gps.witness import Mismatch, annotation_uuids, judge
from gps_dagster.domain.render import kai
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.ports import DeployState, Transient
from gps_dagster.store import Store
from gps_dagster.store.reservations import ReservationRepository, ensure_tables
from gps_dagster.testing.k8s import realnode
from gps_dagster.testing.k8s.kai import RESERVATION_NAMESPACE, KaiBinder, LedgerNodes


class Node:
    def __init__(self, kube: Kube, name: str, root: Path, uuids: tuple[str, ...]) -> None:
        self.kube, self.name, self.root, self.uuids = kube, name, root, uuids

    @property
    def pod_resources(self) -> str:
        return str(self.root / "kubelet" / "pod-resources" / "kubelet.sock")

    def control(self, **doc: list[str]) -> None:
        """Tell the device plugin which GPUs are unhealthy / preferred; return once it applied
        it."""
        text = json.dumps({"nonce": uuid.uuid4().hex, **doc})
        tmp = self.root / "gpus.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.root / "gpus.json")
        applied = self.root / "gpus.json.applied"
        wait_for(
            "the device plugin to apply the control file",
            lambda: applied.exists() and applied.read_text() == text,
            timeout_s=15,
        )

    def allocatable(self) -> str:
        return str(self.kube.core.read_node(self.name).status.allocatable.get(names.GPU))


@pytest.fixture(scope="module")
def node(k8s_cluster: str) -> Iterator[Node]:
    kube = Kube(connect(k8s_cluster, None))
    name = os.environ.get("GPS_TEST_REAL_NODE")
    started = None
    if name:
        root = Path(os.environ["GPS_TEST_REAL_NODE_DIR"])
        uuids = tuple(os.environ["GPS_TEST_REAL_NODE_GPUS"].split(","))
    else:
        root = Path(k8s_cluster).parent / f"node-{os.getpid()}"
        started = realnode.start(root, Path(k8s_cluster), uuids=realnode.gpu_uuids(4))
        name, uuids = started.name, started.uuids
    n = Node(kube, name, root, uuids)
    n.control()
    yield n
    n.control()
    if started is not None:
        started.stop()


@pytest.fixture
def ns(node: Node) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    node.kube.core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while not [
        s
        for s in node.kube.core.list_namespaced_secret(name).items
        if s.metadata.name.startswith("default-token")
    ]:
        assert time.monotonic() < deadline, "no default token in the namespace"
        time.sleep(0.2)
    yield name
    node.kube.core.delete_namespace(name, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while node.kube.core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.5)
    node.control()


def standin_pod(
    name: str, node: str, *, gpus: int = 1, grace_s: int = 30, **env: int
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
            "tolerations": [realnode.REAL_NODE_TOLERATION],
            "terminationGracePeriodSeconds": grace_s,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [
                {
                    "name": "server",
                    "image": realnode.STANDIN_IMAGE,
                    "env": [{"name": k, "value": str(v)} for k, v in env.items()],
                    "resources": {"limits": {names.GPU: str(gpus)}} if gpus else {},
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": 8000},
                        "periodSeconds": 1,
                    },
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


def wait_for(what: str, check: Callable[[], Any], *, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def ready(node: Node, ns: str, name: str) -> bool:
    pod = node.kube.core.read_namespaced_pod(name, ns)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_device_plugin_gpus_become_allocatable_and_unhealthy_lowers_it(node: Node) -> None:
    assert node.allocatable() == str(len(node.uuids))
    node.control(unhealthy=[node.uuids[0]])
    wait_for("allocatable 3", lambda: node.allocatable() == str(len(node.uuids) - 1), timeout_s=30)
    node.control()
    wait_for("allocatable back", lambda: node.allocatable() == str(len(node.uuids)), timeout_s=30)


def test_readiness_comes_from_the_probe_after_the_load_time(node: Node, ns: str) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("slow", node.name, gpus=0, LOAD_S=4))
    running = wait_for(
        "running", lambda: node.kube.core.read_namespaced_pod("slow", ns).status.phase == "Running"
    )
    assert running
    t0 = time.monotonic()
    assert not ready(node, ns, "slow"), "Ready before the model loaded: no probe ran"
    wait_for("ready", lambda: ready(node, ns, "slow"), timeout_s=60)
    assert time.monotonic() - t0 >= 1.5  # the probe, not a fixed delay, made it Ready


def test_the_witness_comes_from_the_kubelets_podresources(node: Node, ns: str) -> None:
    node.control(prefer=[node.uuids[2]])  # the kubelet asks GetPreferredAllocation: this one
    node.kube.core.create_namespaced_pod(ns, standin_pod("gpu", node.name, gpus=1))
    wait_for("ready", lambda: ready(node, ns, "gpu"), timeout_s=90)
    source = nodeagent.source_from(pod_resources_socket=node.pod_resources, dcgm_url=None)
    found = source.devices()
    assert found[(ns, "gpu")] == {"server": (node.uuids[2],)}
    assert nodeagent.publish(node.kube, node.name, source) >= 1
    pod = node.kube.api_client.sanitize_for_serialization(
        node.kube.core.read_namespaced_pod("gpu", ns)
    )
    assert annotation_uuids(pod) == (node.uuids[2],)  # what the adapter's witness reads
    assert pod["metadata"]["annotations"][names.AGENT_SOURCE] == "podresources"
    assert nodeagent.publish(node.kube, node.name, source) == 0  # idempotent: nothing changed


def test_a_gpu_outside_the_reservation_is_a_placement_mismatch(node: Node, ns: str) -> None:
    reserved = node.uuids[:2]
    node.control(prefer=[node.uuids[3]])  # the plugin steers the kubelet off the reservation
    node.kube.core.create_namespaced_pod(ns, standin_pod("off", node.name, gpus=1))
    wait_for("ready", lambda: ready(node, ns, "off"), timeout_s=90)
    nodeagent.publish(node.kube, node.name, nodeagent.PodResourcesSource(socket=node.pod_resources))
    pod = node.kube.api_client.sanitize_for_serialization(
        node.kube.core.read_namespaced_pod("off", ns)
    )
    verdict = judge(annotation_uuids(pod), "rsv-1", reserved, source="node_agent_podresources")
    assert isinstance(verdict, Mismatch)
    assert verdict.outside == (node.uuids[3],) and verdict.reason == "placement_mismatch"


def test_the_node_agent_command_annotates_and_stops_on_sigterm(
    node: Node, ns: str, k8s_cluster: str
) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("agent", node.name, gpus=1))
    wait_for("ready", lambda: ready(node, ns, "agent"), timeout_s=90)
    agent = subprocess.Popen(
        [str(Path(sys.executable).with_name("gps-dagster")), "node-agent", "--node", node.name,
         "--pod-resources-socket", node.pod_resources, "--kubeconfig", k8s_cluster,
         "--interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def annotated() -> str | None:
        assert agent.poll() is None, "the agent exited"
        ann = node.kube.core.read_namespaced_pod("agent", ns).metadata.annotations or {}
        return ann.get(names.agent_device_annotation("server"))

    try:
        got = wait_for(
            "the agent's annotation", annotated, timeout_s=120
        )  # CLI start is slow under load
    except AssertionError:
        agent.kill()
        raise AssertionError(
            "agent output: " + agent.communicate(timeout=15)[0].decode(errors="replace")
        ) from None
    agent.send_signal(signal.SIGTERM)
    out = agent.communicate(timeout=30)[0].decode(errors="replace")
    assert got in node.uuids
    assert agent.returncode == 0, out


def test_graceful_termination_is_the_containers_drain(node: Node, ns: str) -> None:
    node.kube.core.create_namespaced_pod(ns, standin_pod("drain", node.name, gpus=1, DRAIN_S=3))
    wait_for("ready", lambda: ready(node, ns, "drain"), timeout_s=90)
    t0 = time.monotonic()
    node.kube.core.delete_namespaced_pod("drain", ns)

    def gone() -> bool:
        return not [
            p for p in node.kube.core.list_namespaced_pod(ns).items if p.metadata.name == "drain"
        ]

    wait_for("pod gone", gone, timeout_s=60)
    took = time.monotonic() - t0
    assert 3 <= took < 30, (
        f"deletion took {took:.1f} s: the drain (3 s) decides, not the 30 s grace"
    )


def test_a_crashing_server_ends_in_crash_loop_back_off(node: Node, ns: str) -> None:
    node.kube.core.create_namespaced_pod(
        ns, standin_pod("crash", node.name, gpus=0, CRASH_AFTER_S=1)
    )

    def waiting_reason() -> str | None:
        st = node.kube.core.read_namespaced_pod("crash", ns).status.container_statuses or []
        w = st[0].state.waiting if st else None
        return w.reason if w is not None and w.reason == "CrashLoopBackOff" else None

    assert wait_for("CrashLoopBackOff", waiting_reason, timeout_s=90) == "CrashLoopBackOff"
    st = node.kube.core.read_namespaced_pod("crash", ns).status.container_statuses[0]
    assert st.last_state.terminated.exit_code == 3


def test_pods_that_do_not_tolerate_the_real_node_stay_off_it(node: Node, ns: str) -> None:
    body = standin_pod("intruder", node.name, gpus=1)
    body["spec"].pop("tolerations")
    node.kube.core.create_namespaced_pod(ns, body)

    def unschedulable() -> bool:
        pod = node.kube.core.read_namespaced_pod("intruder", ns)
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in pod.status.conditions or []
        )

    assert wait_for("the scheduler's verdict", unschedulable, timeout_s=30)
    assert node.kube.core.read_namespaced_pod("intruder", ns).spec.node_name is None


# -- the engine end to end on the real node (issue 19 item 5) --------------------------------------

T0 = datetime(2026, 10, 19, 7, 59, 55, tzinfo=UTC)
"""Five seconds before the day window opens (a fixed instant: nothing depends on the date)."""


def deployment(
    name: str, *, gpus: int, running: bool, grace_s: int = 30, **env: int
) -> dict[str, Any]:
    pod = standin_pod(name, "", gpus=gpus, grace_s=grace_s, **env)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {names.DEPLOY_ID: name},
            "annotations": {names.REPLICAS: "1"},
        },
        "spec": {
            "replicas": 1 if running else 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


def swap_schedule(a: str, b: str) -> dict[str, Any]:
    """The seed's shape, compressed: A runs 08:00-18:00, B outside, release first."""
    return {
        "name": "real-node-swap",
        "timezone": "UTC",
        "mode": "enforce",
        "transition_order": "release_first",
        "targets": [
            {"model_deploy_id": a, "default_state": "stopped", "default_allow_downtime": True},
            {"model_deploy_id": b, "default_state": "running", "default_allow_downtime": True},
        ],
        "windows": [
            {
                "name": "day",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 8 * * *",
                "duration": "10h",
                "states": [
                    {"model_deploy_id": a, "desired_state": "running"},
                    {"model_deploy_id": b, "desired_state": "stopped"},
                ],
            }
        ],
    }


class EngineRun:
    """Store + ``K8sCore`` + the engine with its GPS hooks, on the real node. The kubelet runs in
    wall time, so the virtual clock starts at a fixed instant and moves by the wall time that
    passes between engine passes (a stop timeout of 5 s is 5 s of the container's drain)."""

    def __init__(
        self,
        node: Node,
        ns: str,
        db_url: str,
        schedule: dict[str, Any],
        config: EngineConfig,
        *,
        before: Callable[[], None] | None = None,
        **core: Any,
    ) -> None:
        """``before``: run before every pass (the cluster's other actors: a binder, the agent)."""
        self.node, self.ns, self.before = node, ns, before
        self.clock = VirtualClock(T0)
        self.store = Store.open(db_url)
        ensure_tables(self.store.engine)
        self.core = K8sCore(
            node.kube,
            clock=self.clock,
            namespaces=[ns],
            ledger=ReservationRepository(self.store.engine),
            **core,
        )
        self.spec = load_schedule(schedule)
        self.store.apply_schedule(self.spec, now=T0)
        self.store.set_gate("enforce", now=T0)
        self.engine = Engine(
            self.store, self.core, self.clock, config, **hooks(self.store, self.core)
        )
        self._wall = time.monotonic()

    def create(self, *docs: dict[str, Any]) -> None:
        for d in docs:
            self.node.kube.apps.create_namespaced_deployment(self.ns, d)

    def pass_(self) -> None:
        if self.before is not None:
            self.before()
        now = time.monotonic()
        self.clock.advance(now - self._wall)
        self._wall = now
        self.engine.run_pass()

    def jump(self, instant: datetime) -> None:
        self.clock.set(instant)
        self._wall = time.monotonic()

    def phase(self, target: str) -> str:
        row = self.store.get_status(self.spec.name, target)
        return row.phase if row is not None else ""

    def until(self, what: str, check: Callable[[], Any], *, timeout_s: float = 150) -> Any:
        def step() -> Any:
            self.pass_()
            return check()

        return wait_for(what, step, timeout_s=timeout_s)

    def pods(self, app: str) -> list[Any]:
        return self.node.kube.core.list_namespaced_pod(self.ns, label_selector=f"app={app}").items


def test_the_engine_swaps_a_and_b_on_the_real_nodes_gpus_with_c_untouched(
    node: Node, ns: str, sqlite_url: str
) -> None:
    """A (3 GPUs) and B (3 GPUs) cannot both fit on the node's 4 GPUs next to C (1): each swap
    must release first, see STOPPED only once the kubelet deleted the pods (1 s drain), then get
    the other scheduled and Ready through its readiness probe (1 s load)."""
    run = EngineRun(
        node, ns, sqlite_url, swap_schedule("rn-a", "rn-b"), EngineConfig(pass_interval_s=1)
    )
    run.create(
        deployment("rn-a", gpus=3, running=False, DRAIN_S=1, LOAD_S=1),
        deployment("rn-b", gpus=3, running=True, DRAIN_S=1, LOAD_S=1),
        deployment("rn-c", gpus=1, running=True, LOAD_S=1),
    )
    wait_for(
        "B and C ready",
        lambda: all(
            any(ready(node, ns, p.metadata.name) for p in run.pods(app)) for app in ("rn-b", "rn-c")
        ),
        timeout_s=90,
    )
    c_uids = {p.metadata.uid for p in run.pods("rn-c")}
    for a, b in (("rn-a", "rn-b"), ("rn-b", "rn-a")):  # 08:00 (A in), then 18:00 (B back)
        run.until(
            f"{a} in, {b} out",
            lambda a=a, b=b: (
                run.phase(a) == run.phase(b) == "converged"
                and run.core.get_deploy(a).state is DeployState.READY
            ),
        )
        assert run.core.get_deploy(b).state is DeployState.STOPPED and not run.pods(
            b
        )  # the kubelet's deletion
        started = run.pods(a)
        assert (
            len(started) == 1
            and started[0].spec.node_name == node.name
            and ready(node, ns, started[0].metadata.name)
        )
        got = node.kube.core.read_namespaced_pod(started[0].metadata.name, ns)
        assert got.status.container_statuses[0].ready  # the probe passed, not a patch
        if a == "rn-a":
            run.jump(datetime(2026, 10, 19, 17, 59, 58, tzinfo=UTC))
    assert {p.metadata.uid for p in run.pods("rn-c")} == c_uids  # C never restarted
    swaps = [
        [
            x.deploy_id
            for x in sorted(run.store.list_actions(transition_id=t.id), key=lambda x: x.seq)
        ]
        for t in run.store.list_transitions()
    ]
    assert [s for s in swaps if s] == [
        ["rn-b", "rn-a"],
        ["rn-a", "rn-b"],
    ]  # release first, each time


def test_a_drain_longer_than_the_stop_timeout_ends_stop_timeout(
    node: Node, ns: str, sqlite_url: str
) -> None:
    """B drains for 40 s on SIGTERM (grace 60 s); the engine's stop timeout is 5 s: B ends
    ``stop_timeout`` and A is never started on GPUs B still holds."""
    run = EngineRun(
        node,
        ns,
        sqlite_url,
        swap_schedule("rn-a", "rn-b"),
        EngineConfig(pass_interval_s=1, stop_timeout_s=5),
    )
    run.create(
        deployment("rn-a", gpus=3, running=False, LOAD_S=1),
        deployment("rn-b", gpus=3, running=True, grace_s=60, DRAIN_S=40, LOAD_S=1),
    )
    wait_for(
        "B ready",
        lambda: any(ready(node, ns, p.metadata.name) for p in run.pods("rn-b")),
        timeout_s=90,
    )
    run.until("B stop_timeout", lambda: run.phase("rn-b") == "stop_timeout", timeout_s=60)
    assert (
        run.pods("rn-b") and run.pods("rn-b")[0].metadata.deletion_timestamp is not None
    )  # still draining
    assert not [p for p in run.pods("rn-a") if p.spec.node_name]  # A not placed on B's GPUs


def test_a_crash_looping_server_ends_in_a_terminal_phase(
    node: Node, ns: str, sqlite_url: str
) -> None:
    """A exits 3 two seconds after it starts, before its model loaded, again and again (the
    kubelet's CrashLoopBackOff): its start never converges and ends ``readiness_timeout`` with the
    reason, not in a silent wait. (A server that passes its probe once before crashing converges,
    then ends ``crash_loop``: ``test_a_server_that_crash_loops_after_ready_ends_crash_loop``.)"""
    run = EngineRun(
        node,
        ns,
        sqlite_url,
        swap_schedule("rn-a", "rn-b"),
        EngineConfig(pass_interval_s=1, readiness_timeout_s=25),
    )
    run.create(
        deployment("rn-a", gpus=1, running=False, LOAD_S=30, CRASH_AFTER_S=2),
        deployment("rn-b", gpus=1, running=False),
    )
    seen: list[tuple[str, str | None]] = []

    def ended() -> bool:
        row = run.store.get_status(run.spec.name, "rn-a")
        seen.append((row.phase, row.reason) if row else ("", None))
        return seen[-1][0] == "readiness_timeout"

    try:
        run.until("A readiness_timeout", ended, timeout_s=120)
    finally:
        print(sorted(set(seen)), run.clock.now())
    row = run.store.get_status(run.spec.name, "rn-a")
    assert row is not None and row.fix
    (pod,) = run.pods("rn-a")
    status = pod.status.container_statuses[0]
    assert status.restart_count >= 1 and (status.last_state.terminated.exit_code == 3)


def test_a_dead_agents_stale_witness_is_witness_unavailable(node: Node, ns: str) -> None:
    """The agent publishes the real kubelet's PodResources record with its heartbeat stamp (its
    clock, injected); once the stamp is older than ``STALE_AFTER_S`` and nobody re-stamped (the
    agent is dead), the adapter's witness read answers ``witness_unavailable`` with the fix
    instead of the old UUIDs; the agent's next sync re-confirms it. Mutation caught: a witness
    that trusts a record no agent has confirmed within the bound."""
    node.kube.apps.create_namespaced_deployment(
        ns, deployment("rn-hb", gpus=1, running=True, LOAD_S=0)
    )
    wait_for(
        "ready",
        lambda: any(
            ready(node, ns, p.metadata.name)
            for p in node.kube.core.list_namespaced_pod(ns, label_selector="app=rn-hb").items
        ),
        timeout_s=90,
    )
    clock = VirtualClock(T0)
    source = nodeagent.PodResourcesSource(socket=node.pod_resources)
    assert nodeagent.publish(node.kube, node.name, source, namespaces=[ns], clock=clock) == 1
    core = K8sCore(node.kube, clock=clock, namespaces=[ns])
    wait_for(
        "the deployment's readyReplicas",
        lambda: core.get_deploy("rn-hb").state is DeployState.READY,
        timeout_s=30,
    )
    seen = core.witness("rn-hb")
    assert (
        len(seen.uuids) == 1
        and seen.uuids[0] in node.uuids
        and seen.source == "node_agent_podresources"
    )
    clock.advance(nodeagent.STALE_AFTER_S + 1)  # no sync in between: the agent is dead
    with pytest.raises(Transient) as err:
        core.witness("rn-hb")
    assert err.value.reason == "witness_unavailable" and node.name in str(err.value)
    assert "node-agent DaemonSet" in str(err.value)
    assert (
        nodeagent.publish(node.kube, node.name, source, namespaces=[ns], clock=clock) == 1
    )  # re-stamped
    assert core.witness("rn-hb").uuids == seen.uuids


def test_a_server_that_crash_loops_after_ready_ends_crash_loop(
    node: Node, ns: str, sqlite_url: str
) -> None:
    """A is Ready after 1 s and exits 3 after 8 s, at every start: its start converges, then the
    kubelet restarts it (at once, then after 10 s, 20 s of CrashLoopBackOff). The target must
    leave ``converged`` for terminal ``crash_loop`` with the kubelet's words and the fix once a
    container waits in CrashLoopBackOff after 2 restarts (the bound), and not before. Mutations
    caught: no crash-loop check (it stays ``converged`` and the test times out), the bound ignored
    (``crash_loop`` at the first back-off)."""
    run = EngineRun(
        node,
        ns,
        sqlite_url,
        swap_schedule("rn-a", "rn-b"),
        EngineConfig(pass_interval_s=1, crash_loop_restarts=2),
    )
    run.create(
        deployment("rn-a", gpus=1, running=False, LOAD_S=1, CRASH_AFTER_S=8),
        deployment("rn-b", gpus=0, running=False),
    )
    seen: list[tuple[str, int, str | None]] = []

    def ended() -> bool:
        view = run.core.get_deploy("rn-a")
        seen.append((run.phase("rn-a"), view.restarts, view.crash_loop))
        return seen[-1][0] == "crash_loop"

    try:
        run.until("A crash_loop", ended, timeout_s=150)
    finally:
        print(sorted({(p, r, c is not None) for p, r, c in seen}))
    phases = [p for p, _, _ in seen]
    assert "converged" in phases and phases.index("converged") < phases.index("crash_loop")
    # below the bound no verdict: a back-off seen with fewer restarts left it converged. Whether
    # a pass saw one is the machine's timing (under load the kubelet can be past restart 2 at
    # the first look), so the bound is proven by the verdict's own count below, read when the
    # engine decided: the bound ignored decides at the first back-off, with restarts 1.
    below = {p for p, r, c in seen if c is not None and r < 2}
    assert below <= {"converged"}, seen
    row = run.store.get_status(run.spec.name, "rn-a")
    assert (
        row is not None
        and row.reason == "crash_loop"
        and "kubectl logs --previous" in (row.fix or "")
    )
    assert "CrashLoopBackOff" in (row.fix or "") and "last exit code 3" in (row.fix or "")
    assert (row.detail or {})["restarts"] >= 2, row.detail  # the bound, as decided
    assert run.core.get_deploy("rn-a").desired_replicas == 1 and run.pods("rn-a")  # nothing stopped


def test_a_hand_over_waits_for_the_drain_to_free_the_gpus(
    node: Node, ns: str, sqlite_url: str
) -> None:
    """A holds all 4 GPUs and drains 8 s on SIGTERM; at 08:00 the schedule releases A and starts B
    (4 GPUs). The engine may start B only once the kubelet has deleted A's pod (its GPUs free in
    the device manager): no pass may see B's Deployment scaled up while a pod of A still exists,
    and the kubelet's PodResources never lists a UUID for B that A still holds. Mutation caught:
    stop convergence that ignores terminating pods (``converged_stopped`` = STOPPED alone) starts
    B during A's drain."""
    run = EngineRun(
        node, ns, sqlite_url, swap_schedule("rn-b", "rn-a"), EngineConfig(pass_interval_s=1)
    )
    run.create(
        deployment("rn-a", gpus=4, running=True, DRAIN_S=8, LOAD_S=1),
        deployment("rn-b", gpus=4, running=False, LOAD_S=1),
    )
    wait_for(
        "A ready",
        lambda: any(ready(node, ns, p.metadata.name) for p in run.pods("rn-a")),
        timeout_s=90,
    )
    source = nodeagent.PodResourcesSource(socket=node.pod_resources)
    samples: list[tuple[int, int, bool]] = []  # (A pods, B replicas, A draining)
    overlaps: list[str] = []

    def step() -> bool:
        a_pods = run.pods("rn-a")
        b_replicas = node.kube.apps.read_namespaced_deployment("rn-b", ns).spec.replicas or 0
        samples.append(
            (len(a_pods), b_replicas, any(p.metadata.deletion_timestamp for p in a_pods))
        )
        held: dict[str, set[str]] = {"rn-a": set(), "rn-b": set()}
        for (pns, pod), containers in source.devices().items():
            app = "rn-a" if pod.startswith("rn-a-") else "rn-b" if pod.startswith("rn-b-") else None
            if pns == ns and app:
                held[app].update(u for ids in containers.values() for u in ids)
        if held["rn-a"] & held["rn-b"]:
            overlaps.append(f"{sorted(held['rn-a'] & held['rn-b'])} held by A and B at once")
        return (
            run.phase("rn-b") == "converged"
            and run.core.get_deploy("rn-b").state is DeployState.READY
        )

    t0 = time.monotonic()
    run.until("B in after A's drain", step, timeout_s=150)
    assert not overlaps, overlaps
    assert any(draining for _, _, draining in samples), (
        "A's drain was never seen: the race was not exercised"
    )
    early = [s for s in samples if s[1] > 0 and s[0] > 0]
    assert not early, (
        f"B scaled up while A's pod still existed (A pods, B replicas, draining): {early}"
    )
    assert time.monotonic() - t0 >= 8  # B could not be ready before A's 8 s drain ended
    (b_pod,) = run.pods("rn-b")
    got = source.devices()[(ns, b_pod.metadata.name)]["server"]
    assert sorted(got) == sorted(node.uuids)  # every GPU A had, now B's


def test_a_time_sliced_reservation_swaps_members_through_its_holder(
    node: Node, ns: str, sqlite_url: str
) -> None:
    """Time-sliced rsv-ts holds GPU 1 of the real node; m1 runs 08:00-09:00, m2 from 09:00, both
    members (30 000 of 80 000 MiB). Rendered for KAI, the members request no ``nvidia.com/gpu``:
    KAI's reservation pod of their GPU group takes the GPU whole (the real device plugin gives
    it, the kubelet records it in PodResources) and the node agent maps it to the group's pods.
    At 09:00 m1 is the last running member: the holder pod is created before it stops, keeps the
    group (the same reservation pod, same uid, same device) while m1 drains and m2 starts, and is
    deleted once m2 is ready; the witness of each member is the reservation's UUID. Mutations
    caught: no holder (KAI's reservation pod goes with m1's last pod: m2 gets a new one), a holder
    left behind, a witness that is not the kubelet's record of the reservation pod."""
    gpu = node.uuids[1]
    node.control(prefer=[gpu])  # the kubelet asks GetPreferredAllocation: the reservation's GPU
    policy = {"scheduler_name": "kai-scheduler", "holder_image": realnode.PAUSE_IMAGE}
    node.kube.core.create_namespaced_config_map(
        ns, {"metadata": {"name": names.POLICY_CONFIGMAP}, "data": policy}
    )
    schedule = {
        "name": "real-node-ts", "timezone": "UTC", "mode": "enforce",
        "transition_order": "release_first",
        "targets": [{"model_deploy_id": m, "default_state": "stopped",
                     "default_allow_downtime": True}
                    for m in ("m1", "m2")],
        "windows": [{"name": f"w{i}", "kind": "recurring", "priority": 10,
                     "cron": f"0 {h} * * *", "duration": "1h",
                     "states": [{"model_deploy_id": m, "desired_state": "running"}]}
                    for i, (h, m) in enumerate(((8, "m1"), (9, "m2")))],
    }  # fmt: skip
    spec = ReservationSpec(id="rsv-ts", node=node.name, gpu_uuids=(gpu,), namespace=ns,
                           mode=SharingMode.TIME_SLICED, gpu_memory_mib=80000,
                           headroom="1")  # fmt: skip
    agent = nodeagent.PodResourcesSource(socket=node.pod_resources)
    binder: list[KaiBinder] = []
    holder_seen: list[str] = []

    def actors() -> None:  # KAI's binder stand-in and the node agent, as on a cluster
        binder[0].sync()
        nodeagent.publish(node.kube, node.name, agent)
        holder_seen.extend(
            p.metadata.uid
            for p in node.kube.core.list_namespaced_pod(
                ns, label_selector=f"{kai.ROLE_LABEL}=holder"
            ).items
        )

    run = EngineRun(
        node,
        ns,
        sqlite_url,
        schedule,
        EngineConfig(pass_interval_s=1),
        before=actors,
        policy_namespace=ns,
    )
    rsv = ReservationRepository(run.store.engine).create(spec, at=T0, actor="test")
    binder.append(
        KaiBinder(
            node.kube,
            LedgerNodes([node.name], {rsv.id: rsv}, run.clock),
            scheduler_name="kai-scheduler",
            namespaces=[ns],
            reservation_image=realnode.PAUSE_IMAGE,
            tolerations=(realnode.REAL_NODE_TOLERATION,),
        )
    )
    binding = json.dumps({"mode": "time_sliced", "reservation": rsv.id, "memory_mib": 30000})
    for m in ("m1", "m2"):
        doc = deployment(m, gpus=1, running=False, DRAIN_S=2, LOAD_S=1)
        doc["metadata"]["annotations"][names.RESERVATION] = binding
        run.create(doc)

    def reservation_pods() -> list[Any]:
        try:
            found = node.kube.core.list_namespaced_pod(RESERVATION_NAMESPACE).items
        except Exception:
            return []
        return [
            p for p in found if p.spec.node_name == node.name and not p.metadata.deletion_timestamp
        ]

    def member_in(m: str) -> bool:
        return run.phase(m) == "converged" and run.core.get_deploy(m).state is DeployState.READY

    run.until("m1 in", lambda: member_in("m1"), timeout_s=150)
    (kept,) = reservation_pods()
    assert agent.devices()[(RESERVATION_NAMESPACE, kept.metadata.name)] == {
        "reservation": (gpu,)
    }  # the kubelet's record
    assert (
        run.core.witness("m1").uuids == (gpu,)
        and run.core.witness("m1").source == "node_agent_podresources"
    )
    (m1_pod,) = run.pods("m1")
    assert not (m1_pod.spec.containers[0].resources.limits or {}).get(
        names.GPU
    )  # a share, not a whole GPU
    assert m1_pod.status.container_statuses[0].ready  # the real probe passed
    assert not holder_seen
    run.jump(datetime(2026, 10, 19, 8, 59, 58, tzinfo=UTC))
    run.until(
        "m2 in, m1 out", lambda: member_in("m2") and run.phase("m1") == "converged", timeout_s=150
    )
    run.until(
        "the holder gone",
        lambda: (
            not node.kube.core.list_namespaced_pod(
                ns, label_selector=f"{kai.ROLE_LABEL}=holder"
            ).items
        ),
        timeout_s=60,
    )
    assert holder_seen, "no holder pod kept the GPU group between the members"
    assert [p.metadata.uid for p in reservation_pods()] == [
        kept.metadata.uid
    ]  # the same group, all along
    assert run.core.get_deploy("m1").state is DeployState.STOPPED and not run.pods("m1")
    assert run.core.witness("m2").uuids == (gpu,)
    (m2_pod,) = run.pods("m2")
    assert m2_pod.metadata.labels.get("runai-gpu-group") == kept.metadata.labels["runai-gpu-group"]
