"""Issue 18 item 3 (R-K8S-8): a claimed deploy is pinned to the object first seen behind its id.

A deploy id is a label. When GitOps (or an operator) deletes the Deployment and creates it again
under the same name, the API server gives the new object another ``metadata.uid``: it is not the
workload the schedule was applied to. The engine must say so (``ineligible{deploy_replaced}`` with
its fix) and never act on the replacement, neither at planning nor inside a swap already under
way, until an operator re-claims it. On the real control plane, end to end (``tests/k8s/world.py``):
the engine's own loop on a virtual clock while the cluster moves.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.workloads import read
from gps_dagster.domain.phases import INELIGIBLE_FIXES
from gps_dagster.engine.operations import apply_now
from gps_dagster.ports import DeployState, NotFound
from tests.engine.harness import A, B, a_running_pool, local, seed_schedule
from tests.k8s.world import K8sWorld

EVENING = local("2026-10-19T17:59:30")


def recreate(w: K8sWorld, deploy_id: str) -> str:
    """Delete ``deploy_id``'s Deployment and create it again from its manifest, as a GitOps sync
    of a deleted object does: same name, labels and template, none of the product's ledger
    annotations (Git never held them). Returns the new object's uid."""
    kind, ns, name = w.cluster.workloads[deploy_id]
    assert kind == "Deployment"
    kube = w.cluster.kube
    old = read(kube, kind, ns, name).raw
    kube.call(
        kube.apps.delete_namespaced_deployment,
        name,
        ns,
        propagation_policy="Background",
        what=f"delete {name}",
        mutating=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            read(kube, kind, ns, name)
        except NotFound:
            break
        assert time.monotonic() < deadline, f"{name} not deleted within 30 s"
        time.sleep(0.1)
    meta = old["metadata"]
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k != names.OPERATIONS}
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": meta.get("labels") or {},
            "annotations": notes,
        },
        "spec": {k: v for k, v in old["spec"].items() if k != "replicas"} | {"replicas": 0},
    }
    created = kube.call(
        kube.apps.create_namespaced_deployment, ns, body, what=f"create {name}", mutating=True
    )
    assert created["metadata"]["uid"] != meta["uid"]
    return str(created["metadata"]["uid"])


def untouched(w: K8sWorld, deploy_id: str) -> None:
    """The replacement carries no operation of the product and was never scaled by it."""
    kind, ns, name = w.cluster.workloads[deploy_id]
    raw = read(w.cluster.kube, kind, ns, name).raw
    assert names.OPERATIONS not in (raw["metadata"].get("annotations") or {})
    assert raw["spec"]["replicas"] == 0


def test_a_deployment_recreated_before_the_swap_is_deploy_replaced_and_nothing_is_released(
    new_world: Any,
) -> None:
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    w.tick(0)  # the loop's first pass: it pins what it sees
    first = w.store.pins_for([A, B])
    assert first == {A: w.deploy(A).instance, B: w.deploy(B).instance}
    assert first[B] is not None and "uid=" in first[B]
    uid = recreate(w, B)
    w.run_until(local("2026-10-19T18:05"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("ineligible", "deploy_replaced")
    assert INELIGIBLE_FIXES["deploy_replaced"] in (st.fix or "") and "reclaim" in (st.fix or "")
    assert first[B] in (st.fix or "") and (st.detail or {}).get("seen") == w.deploy(B).instance
    untouched(w, B)
    assert w.deploy(B).instance != first[B] and uid in (w.deploy(B).instance or "")
    assert w.store.pins_for([B]) == {B: first[B]}  # the pin stays until a re-claim
    # B could not acquire, so nothing was released for it: A still runs (R-PASS-6)
    assert w.deploy(A).state is DeployState.READY and w.operations(A) == []
    # the operator checks the new object, re-claims it and applies now: the swap goes on with it
    assert w.store.reclaim(w.spec.name, B, now=w.clock.now()) == first[B]
    apply_now(w.engine, w.store, w.spec.name, actor="sre")
    w.run_until(local("2026-10-19T18:12"))
    assert w.store.pins_for([B]) == {B: w.deploy(B).instance}
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop"), (B, "start")]
    assert {t: w.status(t).phase for t in (A, B)} == {A: "converged", B: "converged"}
    assert w.deploy(B).state is DeployState.READY and uid in (w.deploy(B).instance or "")
    kinds = [e.kind for e in w.store.list_events(w.spec.name, limit=1000)]
    assert "target_reclaimed" in kinds


def test_a_deployment_recreated_mid_swap_ends_the_start_deploy_replaced_and_is_never_scaled(
    new_world: Any,
) -> None:
    w = new_world(schedule=seed_schedule(), pool=a_running_pool(), start=EVENING)
    w.tick(0)
    pinned = w.store.pins_for([B])[B]
    w.advance_to(local("2026-10-19T18:00:01"))  # 18:00's pass opened the plan, stopped A
    steps = {a.deploy_id: a for a in w.store.list_actions()}
    assert steps[A].state == "accepted" and steps[B].state in ("pending", "capacity_wait")
    assert steps[B].planned.instance == pinned
    recreate(w, B)
    w.run_until(local("2026-10-19T18:06"))
    start = {a.deploy_id: a for a in w.store.list_actions()}[B]
    assert (start.state, start.reason) == ("failed", "deploy_replaced")
    st = w.status(B)
    assert (st.phase, st.reason) == ("ineligible", "deploy_replaced")
    assert pinned is not None and pinned in (st.fix or "") + str(st.detail)
    untouched(w, B)
    assert [(d, k) for d, k, _ in w.operations()] == [(A, "stop")]
    assert w.clock.now() - local("2026-10-19T18:00") < timedelta(minutes=7)
