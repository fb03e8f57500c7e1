"""Issue 18 item 5 (SPEC R-K8S-7): reads never write; the holder goes in the fenced, gated converge.

Before, every ``get_deploy`` of a READY time-sliced member DELETEd its reservation's holder pod —
in dry-run, observe mode, ``pool show``, the API and on every replica — so a read-only identity
could not even read. Here, on the control plane:

* a read-only ServiceAccount (capacity + deploy reads only, ``rbac.manifests(readonly=True)``)
  runs what status, dry-run, ``pool show`` and the API do, with a READY member and its holder on
  the cluster, and sends no write request (counted at its HTTP transport) — the holder stays;
* in observe mode the engine's passes send no write request at all, while the member becomes
  READY under them;
* with the gate enforcing, the holder made by the stop of the last member is gone once the
  engine converged the start that readied the next one.

End to end (``tests/k8s/world.py``): the engine's own loop while the cluster moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gps_dagster.backends.k8s import K8sCore, Kube, pods, rbac
from gps_dagster.domain.pool import gpu_uuid
from gps_dagster.domain.render import kai
from gps_dagster.engine.dry_run import dry_run
from gps_dagster.ports import DeployState
from gps_dagster.store.reservations import ReservationRepository
from tests.engine.harness import A, B, local, seed_schedule
from tests.helm.psa import restricted
from tests.k8s.world import K8sWorld

EVENING = local("2026-10-19T17:59:30")
"""B's window opens at 18:00: the pass stops A (the last running member) and starts B."""


def shared_pool() -> dict[str, Any]:
    """A and B: time-sliced members of one reservation (one GPU, 80 000 MiB)."""
    member = {"mode": "time_sliced", "reservation": "rsv-ts", "memory_mib": 30000}
    return {
        "name": "rnw",
        "nodes": [{"name": "n1", "gpus": 8}],
        "reservations": [
            {
                "id": "rsv-ts",
                "node": "n1",
                "namespace": "cmp-team",
                "mode": "time_sliced",
                "gpu_memory_mib": 80000,
                "headroom": "1",
                "gpu_uuids": [gpu_uuid("rnw", "n1", 0)],
            }
        ],
        "deploys": [
            {"id": A, "gpus_per_replica": 1, "state": "running", "reservation": member},
            {"id": B, "gpus_per_replica": 1, "reservation": member},
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 90}},
    }


class Writes:
    """Every non-GET request a client sends (a proxy at its transport)."""

    def __init__(self, api: Kube) -> None:
        self.seen: list[tuple[str, str]] = []
        rest = api.api_client.rest_client
        self._inner = rest.request
        rest.request = self.request

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() != "GET":
            self.seen.append((method, url))
        return self._inner(method, url, *args, **kwargs)


def holder_pod(w: K8sWorld) -> dict[str, Any] | None:
    ns = w.cluster.layout.reservation_namespaces["cmp-team"]
    found = w.cluster.kube.items(w.cluster.kube.core.list_namespaced_pod, ns, what="pods")
    name = kai.holder_name("rsv-ts")
    return next((p for p in found if pods.name(p) == name and not pods.deleting(p)), None)


def until_b_started(w: K8sWorld) -> None:
    """Passes until B's start is accepted (A stopped, the holder created)."""
    for _ in range(20):
        w.tick(15)
        if any(d == B and k == "start" for d, k, _ in w.operations()):
            return
    raise AssertionError(f"B never started: {w.operations()}")


def reader(w: K8sWorld, k8s_cluster: str) -> K8sCore:
    system = w.cluster.layout.system
    rbac.apply(
        w.cluster.kube,
        rbac.manifests(system=system, scope=w.cluster.namespaces, account="reader", readonly=True),
    )
    cfg = yaml.safe_load(Path(k8s_cluster).read_text())["clusters"][0]["cluster"]
    token = rbac.service_account_token(w.cluster.kube, system, account="reader")
    identity = rbac.as_identity(cfg["server"], cfg["certificate-authority"], token)
    return K8sCore(
        identity,
        clock=w.clock,
        namespaces=w.cluster.namespaces,
        ledger=ReservationRepository(w.store.engine),
        policy_namespace=system,
    )


@pytest.fixture
def swapping(new_world: Any) -> Iterator[K8sWorld]:
    w = new_world(schedule=seed_schedule(), pool=shared_pool(), start=EVENING)
    until_b_started(w)
    holder = holder_pod(w)
    assert holder is not None  # made before the last member stopped
    assert restricted(holder["spec"]) == []  # as the API server stored it (issue 18 item 4)
    yield w


def test_a_read_only_identity_reads_everything_and_writes_nothing(
    swapping: K8sWorld, k8s_cluster: str
) -> None:
    w = swapping
    w.store.set_gate("observe", now=w.clock.now())  # the engine stays out of it meanwhile
    # B's pods start (90 s) while the loop only observes. Time runs until they are Ready: under
    # load the ReplicaSet controller creates them late (wall time), so a fixed tick could end
    # before their start delay began, and a wall-clock wait with the clock stopped never ended.
    w.wait_for(
        lambda: w.deploy(B).state is DeployState.READY,
        "B READY",
        by=w.clock.now() + timedelta(minutes=10),
    )
    core = reader(w, k8s_cluster)
    writes = Writes(core.kube)
    assert core.get_deploy(B).state is DeployState.READY  # used to DELETE the holder: 403
    views = core.get_deploys([A, B])
    assert views[B].state is DeployState.READY and views[A].state is DeployState.STOPPED
    assert [d.id for d in core.reservation_deploys("rsv-ts")] == sorted([A, B])
    assert core.inventory().nodes  # pool show
    report = dry_run(w.spec, core, w.clock.now())  # dry-run, as the API and the CLI run it
    assert report is not None
    assert core.admission_preview(A, delta_replicas=1).admitted is not None
    assert writes.seen == []
    assert holder_pod(w) is not None


def test_observe_mode_passes_make_zero_write_requests(swapping: K8sWorld) -> None:
    w = swapping
    w.store.set_gate("observe", now=w.clock.now())
    writes = Writes(w.core.kube)
    passes = len(w.reports)
    w.wait_for(  # B becomes READY under the passes (its pods made in wall time, see above)
        lambda: w.deploy(B).state is DeployState.READY,
        "B READY",
        by=w.clock.now() + timedelta(minutes=10),
    )
    w.tick(60)  # and a few passes with B READY
    assert len(w.reports) > passes + 2  # passes ran, so "no write" is about them
    assert writes.seen == []
    assert holder_pod(w) is not None


def test_the_converge_of_the_start_that_readied_a_member_removes_the_holder(
    swapping: K8sWorld,
) -> None:
    w = swapping
    for _ in range(12):
        if w.status(B).phase == "converged":
            break
        assert holder_pod(w) is not None or w.deploy(B).state is DeployState.READY
        w.tick(30)
    assert w.status(B).phase == "converged"
    assert holder_pod(w) is None
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]
