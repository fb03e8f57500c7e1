"""Test support: the fakes of what cannot run here, and the test control plane (not the product).

The declared face of the test machinery (like kopf's ``kopf/testing.py`` or controller-runtime's
``pkg/client/fake`` and ``pkg/envtest`` as packages of their own). No product room imports it (an
import-linter contract), and neither the wheel nor the image carries it
(``tests/packaging/test_wheel.py``); the test suite, ``tools/``, ``bench/`` and the demo use it
from a checkout.

* ``testing.k8s`` — fakes for the real Kubernetes 1.20 control plane of the tests: GPU nodes
  (``nodesim``), the KAI binder (``kai``), the LeaderWorkerSet controller (``lws``), the NVIDIA
  device plugin for the real kubelet (``deviceplugin``), the pod runner (``runner``), a pool laid
  out on the cluster (``pools.ClusterPool``) and ``settle``; each named as a fake, each acting
  only through the API as the real component does.
* ``testing.k8s.controlplane`` — starts etcd, kube-apiserver, the controller manager and the
  scheduler (``start``, ``ControlPlane``) from the cached build (``tools/k8s``).
* ``testing.k8s.realnode`` — a real kubelet + containerd node joined to that control plane.
* ``FakeCore`` (``testing.fake_core``, its world in ``testing.fake_pool``) — the Core port in
  memory: dicts, instant or clock-driven mutations, faults by one handler (``CoreCall``,
  ``Handler``, ``passthrough``); it refuses what it does not model (``NotModelled``).
"""

# Decisions embodied here (docs/decisions.md):
# * “Test machinery and the demo leave the product”

from gps_dagster.testing.fake_core import (
    INSTANT,
    CoreCall,
    FakeCore,
    Handler,
    NotModelled,
    passthrough,
)

__all__ = ["INSTANT", "CoreCall", "FakeCore", "Handler", "NotModelled", "k8s", "passthrough"]
