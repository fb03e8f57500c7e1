"""Benchmark: release on the real node (issue 19) — kubelet 1.20 + containerd, fake GPUs only.

Row 1: a 2-pod Deployment (1 GPU each, stand-in model server, 1 s drain) scaled to 0, the way a
release step does; the time until ``K8sCore.get_deploys`` reports STOPPED with no terminating
pod (the engine's stop convergence, ``engine/convergence.py``; polled every 0.1 s) against the
kubelet's own pod-deletion time in the same run (the moment the last pod object disappears from
the API server). Goal: ratio <= 1.2.

Row 2: capacity published -> acquire submitted. A 3-GPU pod holds the node's 4 GPUs against a
stopped 3-GPU deploy B. The holder is scaled to 0; the engine side is the adapter path a release-
first step runs before its acquire — stop convergence (``get_deploys``: STOPPED, no terminating
pod), then ``preview_capacity(B)`` = Fits, then ``start(B)`` returned — polled every 0.1 s. The
baseline, in the same round, is the moment the kubelet deleted the holder's pod object (the
GPUs are back on the node). Goal: ratio <= 1.2.

``python bench/k8s_real_node.py`` starts its own control plane and node (root; run
``tools/k8s/build_control_plane.sh`` and ``tools/k8s/build_node.sh`` first).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gps_dagster.backends.k8s import K8sCore, Kube, connect, names
from gps_dagster.clocks import WallClock
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.ports import DeployState, Fits
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s import realnode

ROUNDS = 3


def deployment(name: str, *, replicas: int = 2, gpus: int = 1) -> dict[str, object]:
    labels = {"app": name, names.DEPLOY_ID: name}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {names.REPLICAS: "1"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
                    "tolerations": [realnode.REAL_NODE_TOLERATION],
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "server", "image": realnode.STANDIN_IMAGE,
                        "env": [{"name": "DRAIN_S", "value": "1"}],
                        "resources": {"limits": {names.GPU: str(gpus)}},
                        "readinessProbe": {
                            "httpGet": {"path": "/ready", "port": 8000}, "periodSeconds": 1,
                        },
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }  # fmt: skip


def one_round(kube: Kube, core: K8sCore, ns: str) -> tuple[float, float]:
    name = f"rel-{uuid.uuid4().hex[:6]}"
    kube.apps.create_namespaced_deployment(ns, deployment(name))
    while (kube.apps.read_namespaced_deployment(name, ns).status.ready_replicas or 0) < 2:
        time.sleep(0.2)
    t0 = time.perf_counter()
    kube.apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": 0}})
    kubelet_s = engine_s = None
    while kubelet_s is None or engine_s is None:
        now = time.perf_counter() - t0
        if (
            kubelet_s is None
            and not kube.core.list_namespaced_pod(ns, label_selector=f"app={name}").items
        ):
            kubelet_s = now
        view = core.get_deploys([name])[name]
        if engine_s is None and view.state is DeployState.STOPPED and view.terminating_pods == 0:
            engine_s = time.perf_counter() - t0  # the engine's stop convergence (convergence.py)
        assert now < 120, "release did not finish in 120 s"
        time.sleep(0.1)
    kube.apps.delete_namespaced_deployment(name, ns)
    return kubelet_s, engine_s


def acquire_round(kube: Kube, core: K8sCore, ns: str) -> tuple[float, float]:
    holder, b = f"hold-{uuid.uuid4().hex[:6]}", f"acq-{uuid.uuid4().hex[:6]}"
    kube.apps.create_namespaced_deployment(ns, deployment(holder, replicas=1, gpus=3))
    kube.apps.create_namespaced_deployment(ns, deployment(b, replicas=0, gpus=3))
    while (kube.apps.read_namespaced_deployment(holder, ns).status.ready_replicas or 0) < 1:
        time.sleep(0.2)
    assert not isinstance(core.preview_capacity(b, delta_replicas=1), Fits), (
        "B fits before the release"
    )
    t0 = time.perf_counter()
    kube.apps.patch_namespaced_deployment_scale(holder, ns, {"spec": {"replicas": 0}})
    kubelet_s = engine_s = None
    while kubelet_s is None or engine_s is None:
        now = time.perf_counter() - t0
        if (
            kubelet_s is None
            and not kube.core.list_namespaced_pod(ns, label_selector=f"app={holder}").items
        ):
            kubelet_s = now
        if engine_s is None:
            view = core.get_deploys([holder])[holder]
            stopped = view.state is DeployState.STOPPED and view.terminating_pods == 0
            if stopped and isinstance(core.preview_capacity(b, delta_replicas=1), Fits):
                core.start(b, etag=core.get_deploy(b).etag, idempotency_key=f"bench-{b}")
                engine_s = time.perf_counter() - t0  # the acquire is submitted
        assert now < 120, "capacity did not come back in 120 s"
        time.sleep(0.1)
    for name in (holder, b):
        kube.apps.delete_namespaced_deployment(name, ns)
    while kube.core.list_namespaced_pod(ns).items:  # the next round starts on a free node
        time.sleep(0.2)
    return kubelet_s, engine_s


def report(what: str, rounds: list[tuple[float, float]]) -> None:
    base = statistics.median(k for k, _ in rounds)
    eng = statistics.median(e for _, e in rounds)
    print(
        f"{what}: median {eng:.2f} s over {len(rounds)}; "
        f"baseline kubelet pod deletion {base:.2f} s; "
        f"ratio {eng / base:.2f}x (goal <= 1.2)",
        flush=True,
    )


def main() -> None:
    with exit_on_signals():
        plane = cp.start()
        node = None
        try:
            node = realnode.start(
                plane.root / "node", plane.kubeconfig, uuids=realnode.gpu_uuids(4)
            )
            print(f"  real node Ready in {node.started_s:.1f} s", flush=True)
            kube = Kube(connect(str(plane.kubeconfig), None))
            ns = "bench-real"
            kube.core.create_namespace({"metadata": {"name": ns}})
            cp._wait_default_token(plane, ns, time.monotonic() + 30)
            core = K8sCore(kube, clock=WallClock(), namespaces=[ns])
            report(
                "release 2-pod Deployment -> STOPPED seen by the engine",
                [one_round(kube, core, ns) for _ in range(ROUNDS)],
            )
            report(
                "capacity published -> acquire submitted",
                [acquire_round(kube, core, ns) for _ in range(ROUNDS)],
            )
        finally:
            with signals_held():
                if node is not None:
                    node.stop()
                plane.stop()


if __name__ == "__main__":
    tempfile.tempdir = tempfile.gettempdir()
    main()
