"""The adapter's client under real API Priority and Fairness 429s (control plane 1.20).

The product's identity is put in a priority level of its own with one share and
``limitResponse: Reject`` (APF answers a request over its seats at once with 429 and
``Retry-After: 1``, ``apiserver/pkg/server/filters/maxinflight.go::tooManyRequests``): the 1.20
defaults hold 205 shares of the 600 seats, so this level gets ceil(600 / 206) = 3. Twenty-four
threads then list a namespace holding ~2 MB of ConfigMaps through one ``Kube``: the server
refuses some requests with 429 and every call still returns the full list, because the client
waits out each Retry-After and retries. Without the retry (``max_retries=0``) the same storm
surfaces ``api_throttled`` errors, so the test proves the server really throttled.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml

from gps_dagster.backends.k8s.api import Kube, Throttle
from gps_dagster.ports import Transient
from gps_dagster.testing.k8s.hosts import Cluster, service_account_kubeconfig
from gps_dagster.testing.k8s.pools import wait_default_tokens
from tests.k8s.apf import Refusals, limit_to_three_seats, remove
from tests.k8s.cluster import kube

THREADS, CALLS, CONFIGMAPS, ROUNDS = 24, 3, 10, 8


def cluster_of(kubeconfig: str) -> Cluster:
    entry = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    return Cluster(entry["server"], entry["certificate-authority"])


@pytest.fixture
def throttled_identity(k8s_cluster: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A namespace, a ServiceAccount that may list ConfigMaps there, and APF giving it 3 seats."""
    admin = kube(k8s_cluster)
    ns = f"apf-{uuid.uuid4().hex[:6]}"
    admin.call(admin.core.create_namespace, {"metadata": {"name": ns}}, what="ns", mutating=True)
    wait_default_tokens(admin, [ns])
    admin.call(
        admin.core.create_namespaced_service_account,
        ns,
        {"metadata": {"name": "engine"}},
        what="sa",
        mutating=True,
    )
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin.api_client)
    admin.call(
        rbac.create_namespaced_role,
        ns,
        {
            "metadata": {"name": "list-cm"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
        what="role",
        mutating=True,
    )
    admin.call(
        rbac.create_namespaced_role_binding,
        ns,
        {
            "metadata": {"name": "list-cm"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "list-cm"},
            "subjects": [{"kind": "ServiceAccount", "name": "engine", "namespace": ns}],
        },
        what="binding",
        mutating=True,
    )
    blob = "x" * 200_000
    for i in range(CONFIGMAPS):
        admin.call(
            admin.core.create_namespaced_config_map,
            ns,
            {"metadata": {"name": f"cm-{i}"}, "data": {"blob": blob}},
            what="cm",
            mutating=True,
        )
    limited = limit_to_three_seats(admin, ns, "engine")
    config = service_account_kubeconfig(
        admin, ns, "engine", tmp_path / "engine.kubeconfig", cluster=cluster_of(k8s_cluster)
    )
    yield ns, config
    remove(admin, limited)
    admin.call(admin.core.delete_namespace, ns, what="ns", mutating=True)


def storm(client: Kube, ns: str) -> tuple[list[int], list[BaseException], int]:
    """THREADS x CALLS lists at once; (items per answer, errors, 429s the server sent)."""
    refused = Refusals(client)
    lock = threading.Lock()
    sizes: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker() -> None:
        start.wait()
        for _ in range(CALLS):
            try:
                got = len(client.items(client.core.list_namespaced_config_map, ns, what="list cm"))
                with lock:
                    sizes.append(got)
            except Transient as exc:
                with lock:
                    errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a throttled call hung"
    return sizes, errors, refused.count


def connected(config: Path, throttle: Throttle) -> Kube:
    api_client = kubernetes.config.new_client_from_config(config_file=str(config))
    api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = THREADS
    return Kube(api_client, throttle=throttle)


def stormy(client: Kube, ns: str) -> tuple[list[int], list[BaseException], int]:
    """Storms until the server has refused at least one request (3 seats are usually enough
    for a few 429s in the first storm; a quiet machine may need another)."""
    total = 0
    sizes: list[int] = []
    errors: list[BaseException] = []
    for _ in range(ROUNDS):
        got, failed, refused = storm(client, ns)
        sizes, errors, total = sizes + got, errors + failed, total + refused
        if refused:
            break
    return sizes, errors, total


def test_apf_429s_are_waited_out_and_every_call_returns_the_whole_list(
    throttled_identity: tuple[str, Path],
) -> None:
    ns, config = throttled_identity
    without = connected(config, Throttle(max_retries=0))
    sizes, errors, refused = stormy(without, ns)
    assert refused > 0, "APF never refused the 3-seat level: the storm proves nothing"
    assert errors and all(getattr(e, "reason", "") == "api_throttled" for e in errors)

    client = connected(config, Throttle(retry_budget_s=60.0))
    sizes, errors, refused = stormy(client, ns)
    assert errors == []
    assert set(sizes) == {CONFIGMAPS + 1}  # ours and the namespace's kube-root-ca.crt
    assert len(sizes) % (THREADS * CALLS) == 0  # every call of every storm answered
    assert refused > 0  # the server throttled this storm too: the retries are what carried it
