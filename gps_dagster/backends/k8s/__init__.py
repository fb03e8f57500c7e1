"""The Kubernetes backend: the ``Core`` port on a real cluster (R-K8S).

The only product package that imports the ``kubernetes`` client (an import-linter contract). The
composition root calls ``build_core`` for ``GPS_BACKEND=kubernetes``. The test control plane and
the fake kubelet / device plugin / binders of the test cluster are test support, in
``gps_dagster.testing.k8s`` (not in the wheel).
"""

from __future__ import annotations

from collections.abc import Sequence

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube, Throttle, connect
from gps_dagster.backends.k8s.cache import ClusterCache
from gps_dagster.backends.k8s.core import K8sCore
from gps_dagster.ports import Clock, Core, ReservationLedger

__all__ = ["ClusterCache", "K8sCore", "Kube", "build_core", "connect"]


def build_core(
    *,
    ledger: ReservationLedger | None,
    clock: Clock,
    kubeconfig: str | None,
    context: str | None,
    namespaces: Sequence[str],
    policy_namespace: str | None = None,
    witness_source: str = "node_agent",
    qps: float = 0.0,
    burst: int = 1,
    cache: bool = True,
    sync_timeout_s: float = 0.0,
) -> Core:
    """The Kubernetes ``Core``: kubeconfig (+ context) or the in-cluster service account.

    ``namespaces`` limits the workloads it may act on (empty = every namespace); ``ledger`` (the
    store's reservation ledger, handed over by the composition root) backs GPS (None:
    reservation-bound deploys are refused);
    ``policy_namespace`` holds the GPS scheduling-policy ConfigMap (None = the default);
    ``witness_source`` is ``node_agent`` or ``none`` (bound deploys refused,
    ``witness_unavailable``);
    ``qps``/``burst`` pace the client (``api.Throttle``; 0 = unlimited); ``cache``: the process's
    one watch cache serves the reads (``cache.ClusterCache``), waited for up to
    ``sync_timeout_s`` (0: not at all — nothing is sent before this returns, and reads go to
    the API server directly until each kind has listed).
    """
    kube = Kube(connect(kubeconfig, context), throttle=Throttle(qps=qps, burst=burst))
    watch: ClusterCache | None = None
    if cache:
        watch = ClusterCache(kube, tuple(namespaces)).start()
        if sync_timeout_s > 0:
            watch.wait_synced(sync_timeout_s)
    return K8sCore(
        kube,
        clock=clock,
        namespaces=tuple(namespaces),
        ledger=ledger,
        policy_namespace=policy_namespace or names.POLICY_NAMESPACE,
        witness_source=witness_source,
        cache=watch,
    )
