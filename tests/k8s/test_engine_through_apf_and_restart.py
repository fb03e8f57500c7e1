"""The engine through a burst of real APF 429s and a real API-server restart, mid-swap.

End to end (``tests/k8s/world.py``): the engine's own loop swaps A → B at the seed's 18:00
boundary, talking to a **second kube-apiserver** on the control plane's etcd (an HA control plane
runs several; ``SecondApiServer``) as its own ServiceAccount, which API Priority and Fairness puts
in a 3-seat ``Reject`` level (``tests/k8s/apf.py``). The fakes, the controllers and the test's
reads use the first API server, which never stops.

1. While every seat of the engine's level is held (``tests/k8s/seat_hold.py``: creates parked in
   a validating webhook, so each other request of that identity is a real 429 with
   ``Retry-After: 1``), the boundary passes: the client waits out its 10 retries and the pass
   records a retry, not a verdict — nothing is mutated, nothing raised, no terminal phase.
2. The seats are freed: A's stop goes out, once.
3. The engine's API server is SIGKILLed before B's start, and passes run against a dead server
   (connection refused) for a minute of virtual time; it is started again (same flags, same
   port) and the swap finishes: one stop of A, one start of B, B converged.

Mutations this catches: a 429 or an unreachable server that ends a target in a terminal phase or
escapes the pass (the world fails on a raised pass); a retry that re-sends a write the server
applied (a second ledger entry); the client giving up on a 429 without retrying (fewer than 11
refusals per throttled call); a restart that leaves the plan stuck (B never converges).
"""

# Decisions embodied here (docs/decisions.md):
# * “The transport never waits on its own; an API-server restart is a second API server's”

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import kubernetes
import pytest

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.backends.k8s.api import MAX_RETRIES, Throttle
from gps_dagster.domain.phases import TERMINAL
from gps_dagster.testing.k8s.controlplane import SecondApiServer
from gps_dagster.testing.k8s.hosts import Cluster, service_account_kubeconfig
from gps_dagster.testing.k8s.pools import wait_default_tokens
from tests.engine.harness import A, B, a_running_pool, local, seed_schedule
from tests.k8s.apf import Refusals, limit_to_three_seats, remove
from tests.k8s.cluster import kube, unique
from tests.k8s.seat_hold import SeatHold
from tests.k8s.world import K8sWorld

EVENING = local("2026-10-19T17:59:30")


@pytest.fixture
def twin(k8s_cluster: str) -> Iterator[SecondApiServer]:
    server = SecondApiServer(Path(k8s_cluster))
    server.start()
    yield server
    server.kill()


@pytest.fixture
def engine_identity(
    k8s_cluster: str, twin: SecondApiServer, tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    """A ServiceAccount bound to cluster-admin (not ``system:masters``, which APF exempts), in a
    3-seat Reject level; its kubeconfig points at the second API server."""
    admin = kube(k8s_cluster)
    ns = unique("apf")
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
        rbac.create_cluster_role_binding,
        {
            "metadata": {"name": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "engine", "namespace": ns}],
        },
        what="binding",
        mutating=True,
    )
    limited = limit_to_three_seats(admin, ns, "engine")
    config = service_account_kubeconfig(
        admin,
        ns,
        "engine",
        tmp_path / "engine.kubeconfig",
        cluster=Cluster(twin.server, str(twin.ca_file)),
    )
    yield ns, config
    remove(admin, limited)
    admin.call(rbac.delete_cluster_role_binding, ns, what="binding cleanup", mutating=True)
    admin.call(admin.core.delete_namespace, ns, what="ns", mutating=True)


def kinds(w: K8sWorld) -> list[tuple[str, str]]:
    return [(d, k) for d, k, _ in w.operations()]


def no_terminal(w: K8sWorld) -> None:
    for target in (A, B):
        row = w.store.get_status(w.spec.name, target)
        assert row is None or row.phase not in {p.value for p in TERMINAL}, (target, row)


def test_the_swap_survives_a_burst_of_429s_and_a_restart_of_its_api_server(
    new_world: Callable[..., K8sWorld],
    k8s_cluster: str,
    twin: SecondApiServer,
    engine_identity: tuple[str, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ns, config = engine_identity
    # The engine's client retries as in production, without waiting wall time for Retry-After.
    engine_kube = Kube(connect(str(config), None), throttle=Throttle(sleep=lambda _s: None))
    refusals = Refusals(engine_kube)
    # Without the watch cache: its six informers LIST at once when it starts, more than this
    # 3-seat Reject level admits (10 refusals before the hold, retried by the informers); the
    # counts below are of the engine's own calls.
    w = new_world(
        schedule=seed_schedule(),
        pool=a_running_pool(),
        start=EVENING,
        core_kube=engine_kube,
        cache=False,
    )
    w.tick(10)
    assert refusals.count == 0 and kinds(w) == []

    hold = SeatHold(kube(k8s_cluster), Path(k8s_cluster).parent / "pki", tmp_path)
    try:
        holder = Kube(connect(str(config), None), timeout_s=120, throttle=Throttle(max_retries=0))
        held = hold.engage(holder, ns)
        assert held >= 1
        before = refusals.count
        w.advance_to(local("2026-10-19T18:00:40"))  # the boundary passes with every seat held
        assert refusals.count - before >= MAX_RETRIES + 1, "a throttled call was not retried"
        assert kinds(w) == [], "something was mutated through a throttled server"
        no_terminal(w)
        assert any("throttling this client" in r.getMessage() for r in caplog.records), (
            "no pass saw the server throttling it"
        )
    finally:
        hold.close()

    w.wait_for(lambda: (A, "stop") in kinds(w), "A's stop accepted", by=local("2026-10-19T18:03"))
    assert (B, "start") not in kinds(w)  # A's pods still hold the GPUs for their grace period
    twin.kill()
    w.advance_to(w.clock.now() + timedelta(minutes=1))  # passes against a dead server
    assert (B, "start") not in kinds(w), "a start went out while the engine's server was down"
    assert any("unreachable" in r.getMessage() for r in caplog.records), (
        "no pass met the dead server"
    )
    no_terminal(w)
    twin.start()
    w.wait_for(
        lambda: w.store.get_status(w.spec.name, B) is not None and w.status(B).phase == "converged",
        "B converged",
        by=local("2026-10-19T18:10"),
    )
    assert kinds(w) == [(A, "stop"), (B, "start")], "a mutation was sent twice or lost"
    assert w.status(A).phase == "converged"
