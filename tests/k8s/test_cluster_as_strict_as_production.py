"""The test cluster is not kinder than a production one (issue 18, "The test cluster stops being
kinder than reality"): API Priority and Fairness on, the scheduler and the controller-manager at
their default backoffs, QPS and syncs, and the test Deployments written as tenants write them.

Each test reads the *running* control plane of this session (the processes behind
``GPS_TEST_KUBECONFIG``, their command lines and the scheduler's config file), so a speed-up
flag added to ``gps_dagster/testing/k8s/controlplane.py`` fails here, not silently elsewhere.
"""
# Decisions embodied here (docs/decisions.md):
# * “The test control plane runs only wiring flags, asserted from its running processes”

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gps_dagster.backends.k8s import names
from tests.k8s.test_adapter_on_cluster import Pool, two_deploys
from tests.k8s.test_verdicts import create, deployment

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1beta1"
"""APF's API in 1.20 (beta; the feature gate APIPriorityAndFairness is on by default there)."""
DEFAULT_LEVELS = {
    "exempt",
    "catch-all",
    "system",
    "leader-election",
    "workload-high",
    "workload-low",
    "global-default",
}
"""The bootstrap priority levels an APF-enabled 1.20 API server creates (the same names as
``/debug/api_priority_and_fairness/dump_priority_levels`` lists, kubernetes.io/docs/reference/
debug-cluster/flow-control)."""

WIRING = {
    # Only where to listen, whom to trust, what to store: nothing that changes how fast or how
    # leniently the components work. A new flag must be added here on purpose.
    "kube-apiserver": {
        "--etcd-servers",
        "--bind-address",
        "--advertise-address",
        "--secure-port",
        "--insecure-port",
        "--tls-cert-file",
        "--tls-private-key-file",
        "--client-ca-file",
        "--token-auth-file",
        "--authorization-mode",
        "--service-account-key-file",
        "--service-account-signing-key-file",
        "--service-account-issuer",
        "--service-cluster-ip-range",
        "--endpoint-reconciler-type",
        "--enable-admission-plugins",
        "--feature-gates",
        "--v",
    },
    "kube-controller-manager": {
        "--kubeconfig",
        "--leader-elect",
        "--service-account-private-key-file",
        "--root-ca-file",
        "--secure-port",
        "--port",
        "--feature-gates",
        "--v",
    },
    "kube-scheduler": {"--config", "--secure-port", "--v"},
}
LENIENT = {
    # What a kinder test cluster would set (each at its default in production).
    "kube-apiserver": {
        "--enable-priority-and-fairness",
        "--max-requests-inflight",
        "--max-mutating-requests-inflight",
        "--disable-admission-plugins",
        "--request-timeout",
    },
    "kube-controller-manager": {
        "--concurrent-deployment-syncs",
        "--concurrent-replicaset-syncs",
        "--kube-api-qps",
        "--kube-api-burst",
        "--node-monitor-period",
        "--node-monitor-grace-period",
        "--pod-eviction-timeout",
        "--min-resync-period",
        "--resource-quota-sync-period",
        "--controllers",
    },
    "kube-scheduler": {
        "--kube-api-qps",
        "--kube-api-burst",
        "--policy-config-file",
        "--algorithm-provider",
    },
}


def plane_root() -> Path:
    from tests.k8s.cluster import kubeconfig

    return Path(kubeconfig()).parent


def running(root: Path) -> dict[str, list[str]]:
    """The command line of each control-plane process of this session (by the files under its
    root that only its own processes name)."""
    found: dict[str, list[str]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        if not argv or str(root) not in " ".join(argv[1:]):
            continue
        name = Path(argv[0]).name
        if name in WIRING:
            found[name] = argv[1:]
    return found


def flag_names(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


@pytest.fixture
def plane(k8s_cluster: str) -> Iterator[tuple[Path, dict[str, list[str]]]]:
    root = plane_root()
    yield root, running(root)


def get(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    config = yaml.safe_load(Path(plane_root() / "admin.kubeconfig").read_text())
    server = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    context = ssl.create_default_context(cafile=server["certificate-authority"])
    req = urllib.request.Request(
        server["server"] + path, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, context=context, timeout=10) as resp:
        return json.loads(resp.read()), dict(resp.headers)


def test_api_priority_and_fairness_is_on(k8s_cluster: str) -> None:
    """The flowcontrol API serves the default priority levels, and every answer says which
    flow schema and priority level it was queued under: "Every HTTP response from an API server
    with the priority and fairness feature enabled has two extra headers:
    X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID" (kubernetes.io/docs/
    reference/debug-cluster/flow-control). Mutation caught: ``--enable-priority-and-fairness=
    false`` (or the feature gate off) on the API server — no headers, or no API."""
    levels, _ = get(f"{FLOWCONTROL}/prioritylevelconfigurations")
    served = {i["metadata"]["name"] for i in levels["items"]}
    assert served.issuperset(DEFAULT_LEVELS), served
    schemas, _ = get(f"{FLOWCONTROL}/flowschemas")
    assert {"exempt", "catch-all"} <= {i["metadata"]["name"] for i in schemas["items"]}
    _, headers = get("/api/v1/namespaces/default")
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower.get("x-kubernetes-pf-prioritylevel-uid"), headers
    assert lower.get("x-kubernetes-pf-flowschema-uid"), headers


def test_the_control_plane_runs_at_production_defaults(
    plane: tuple[Path, dict[str, list[str]]],
) -> None:
    """Every control-plane process carries only wiring flags — no speed-up of syncs, QPS, node
    monitoring or eviction, no admission plugin disabled, APF not turned off — and the scheduler's
    configuration sets no backoff (``podInitialBackoffSeconds`` 1 / ``podMaxBackoffSeconds`` 10
    stay the defaults), no profile and no client QPS/burst. Mutation caught: any tuning flag or
    scheduler-config key added to ``controlplane.py``."""
    root, procs = plane
    assert set(procs) == set(WIRING), f"control-plane processes under {root}: {sorted(procs)}"
    for name, argv in procs.items():
        flags = flag_names(argv)
        assert not flags & LENIENT[name], f"{name} is tuned: {sorted(flags & LENIENT[name])}"
        assert flags <= WIRING[name], f"{name}: unexpected flags {sorted(flags - WIRING[name])}"
    api = procs["kube-apiserver"]
    assert "--enable-admission-plugins=ExtendedResourceToleration" in api  # added, none removed
    gates = [a for a in api + procs["kube-controller-manager"] if a.startswith("--feature-gates")]
    assert all(a == "--feature-gates=TTLAfterFinished=true" for a in gates), gates
    config = json.loads((root / "scheduler.yaml").read_text())
    assert set(config) == {
        "apiVersion",
        "kind",
        "clientConnection",
        "leaderElection",
        "healthzBindAddress",
        "metricsBindAddress",
    }, config
    assert set(config["clientConnection"]) == {"kubeconfig"}  # default QPS 50 / burst 100


def test_the_test_deployments_use_the_default_rolling_update_and_app_selectors(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """The Deployments the test pools (``ClusterPool``) and the verdict tests create are written
    as tenants write them: no ``strategy`` (the server's default, "Type of deployment. Can be
    "Recreate" or "RollingUpdate". Default is RollingUpdate", with maxSurge and maxUnavailable
    "Defaults to 25%": ``DeploymentStrategy``/``RollingUpdateDeployment`` API docs) and a
    selector on ``app:`` only — never on the product's deploy-id label, which a kinder cluster
    would use to make every pod trivially ours. Mutation caught: a ``Recreate`` strategy or a
    deploy-id selector in ``pools.py`` / ``test_verdicts.deployment``."""
    p = Pool(two_deploys(), sqlite_url)
    try:
        create(p, p.cluster.layout.admin, deployment("tenant", "tenant"))
        found = [
            d
            for ns in p.cluster.namespaces
            for d in p.admin.items(p.admin.apps.list_namespaced_deployment, ns, what="deploys")
        ]
        assert {d["metadata"]["name"] for d in found} >= {"b", "c", "tenant"}
        for d in found:
            spec, name = d["spec"], d["metadata"]["name"]
            assert spec["strategy"] == {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            }, name
            assert spec["selector"] == {"matchLabels": {"app": name}}, name
            assert names.DEPLOY_ID not in spec["selector"]["matchLabels"]
    finally:
        p.close()


def test_gpu_nodes_are_tainted_sized_like_servers_and_loaded_by_another_tenant(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """The GPU nodes a pool creates look like a rented GPU server, not an empty test box: the
    ``nvidia.com/gpu:NoSchedule`` taint (as GKE and the GPU operator's node setup put it), CPU,
    memory and a 110-pod limit in capacity, and another tenant's agent on each one, bound and
    holding CPU and memory the product must not count as free. Mutations caught: an untainted
    node, a node without CPU/memory (which makes every CPU request fit), no tenant load."""
    from gps_dagster.backends.k8s import pods
    from gps_dagster.testing.k8s.pools import TENANT_LOAD

    p = Pool(two_deploys(), sqlite_url)
    try:
        mine = set(p.cluster.sim.nodes)
        nodes = [
            n
            for n in p.admin.items(p.admin.core.list_node, what="nodes")
            if n["metadata"]["name"] in mine
        ]
        assert {n["metadata"]["name"] for n in nodes} == mine and mine
        bound = p.admin.items(
            p.admin.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName!=",
            what="bound pods",
        )
        for node in nodes:
            name, status = node["metadata"]["name"], node["status"]
            assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"}.items() <= next(
                t for t in node["spec"].get("taints", []) if t["key"] == "nvidia.com/gpu"
            ).items(), name
            assert (
                status["capacity"]["cpu"],
                status["capacity"]["memory"],
                status["capacity"]["pods"],
            ) == ("64", "512Gi", "110"), name
            agents = [
                x
                for x in bound
                if pods.node(x) == name and pods.labels(x).get("app") == "tenant-agent"
            ]
            assert len(agents) == 1, (name, [pods.name(x) for x in agents])
            requests = agents[0]["spec"]["containers"][0]["resources"]["requests"]
            assert requests == TENANT_LOAD, requests
    finally:
        p.close()
