"""Run a command with a real Kubernetes control plane started for it.

`make test` wraps pytest with this (after `tools/k8s/build_control_plane.sh` made sure the
binaries are built): etcd, kube-apiserver, kube-controller-manager and kube-scheduler start on
loopback with free ports, the LeaderWorkerSet CRD is installed, and the admin kubeconfig is
exported as ``GPS_TEST_KUBECONFIG``; everything is stopped on exit. One control plane serves the
whole run; tests isolate themselves by namespace (and contract pools by a node lock).

Next to the fake nodes it starts ONE real node (issue 19; ``testing/k8s/realnode.py``):
containerd + the real kubelet + the fake GPU device plugin, prepared by
``tools/k8s/build_node.sh``; its name and directory are exported as ``GPS_TEST_REAL_NODE`` and
``GPS_TEST_REAL_NODE_DIR``. A missing prerequisite fails the run (``--no-real-node`` opts out,
for a machine that cannot run one: the tests that need it then fail loudly, they never skip).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s import realnode
from gps_dagster.testing.k8s.lws import install_crd


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: with_k8s.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    with_node = "--no-real-node" not in argv[: argv.index("--")]
    with exit_on_signals():  # SIGTERM/SIGHUP too: the control plane is always stopped
        try:
            plane = cp.start()
        except cp.ControlPlaneError as exc:
            print(f"with_k8s: {exc}", file=sys.stderr)
            return 1
        try:
            return _run(plane, command, with_node=with_node)
        finally:
            with signals_held():
                plane.stop()


def _run(plane: cp.ControlPlane, command: list[str], *, with_node: bool) -> int:
    began = time.monotonic()
    install_crd(Kube(connect(str(plane.kubeconfig), None)))
    print(
        f"with_k8s: control plane up at {plane.server} in {plane.started_s:.1f} s "
        f"(+{time.monotonic() - began:.1f} s LWS CRD); kubeconfig {plane.kubeconfig}",
        flush=True,
    )
    env = {**os.environ, **plane.env()}
    if not with_node:
        return subprocess.call(command, env=env)
    try:
        node = realnode.start(plane.root / "node", plane.kubeconfig, uuids=realnode.gpu_uuids(4))
    except realnode.NodeError as exc:
        print(f"with_k8s: {exc}", file=sys.stderr)
        return 1
    try:
        print(
            f"with_k8s: real node {node.name} Ready in {node.started_s:.1f} s ({node.root})",
            flush=True,
        )
        return subprocess.call(command, env={**env, **node.env()})
    finally:
        with signals_held():
            node.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
