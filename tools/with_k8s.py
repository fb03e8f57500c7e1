"""Run a command with a real Kubernetes control plane started for it.

`make test` wraps pytest with this (after `tools/k8s/build_control_plane.sh` made sure the
binaries are built): etcd, kube-apiserver, kube-controller-manager and kube-scheduler start on
loopback with free ports, the LeaderWorkerSet CRD is installed, and the admin kubeconfig is
exported as ``GPS_TEST_KUBECONFIG``; everything is stopped on exit. One control plane serves the
whole run; tests isolate themselves by namespace (and contract pools by a node lock).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.backends.k8s import controlplane as cp
from gps_dagster.backends.k8s.fake.lws import install_crd


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: with_k8s.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    try:
        plane = cp.start()
    except cp.ControlPlaneError as exc:
        print(f"with_k8s: {exc}", file=sys.stderr)
        return 1
    try:
        began = time.monotonic()
        install_crd(Kube(connect(str(plane.kubeconfig), None)))
        print(
            f"with_k8s: control plane up at {plane.server} in {plane.started_s:.1f} s "
            f"(+{time.monotonic() - began:.1f} s LWS CRD); kubeconfig {plane.kubeconfig}",
            flush=True,
        )
        return subprocess.call(command, env={**os.environ, **plane.env()})
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
