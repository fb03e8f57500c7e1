"""What a storm's pass shares on Kubernetes: previews that count each other, one events read.

Acquires previewed together count each other (``backends/k8s/sessions.py``).

The engine's batch previews a batch's acquires in one ``Core.batch()`` block and submits the
fitting ones in one ``submit_many`` only when ``previews_count_fits()``; before, ``K8sCore`` had
no block, so a storm's acquires were previewed and submitted one at a time (each a full write
between two previews: ~0.3 s an acquire on the test cluster, 1,000 acquires in minutes).

An oversubscribed pool's deploys are read together: the cluster-autoscaler's scale-up events are
listed once per namespace of the read, not twice per unschedulable deploy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gps_dagster.backends.k8s import names, pods
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import Fits, Insufficient, Operation, Submission
from gps_dagster.store import Store
from tests.k8s.cluster import T0_K8S
from tests.k8s.test_adapter_on_cluster import Pool


def four_gpu_trio() -> dict[str, Any]:
    """8 GPUs, three stopped 4-GPU deploys: any two fit together, never three."""
    return {
        "name": "trio",
        "nodes": [{"name": "n1", "gpus": 8}],
        "deploys": [{"id": f"g{i}", "gpus_per_replica": 4} for i in range(3)],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def test_previews_in_one_block_count_the_blocks_fits_and_only_its_own(
    k8s_cluster: str, sqlite_url: str
) -> None:
    p = Pool(four_gpu_trio(), sqlite_url)
    try:
        assert p.core.previews_count_fits()
        alone = [p.core.preview_capacity(f"g{i}", delta_replicas=1) for i in range(3)]
        assert alone == [Fits(groups=1)] * 3  # outside a block each preview is on its own
        with p.core.batch():
            first = p.core.preview_capacity("g0", delta_replicas=1)
            with p.core.batch():  # nested: still the outer block
                second = p.core.preview_capacity("g1", delta_replicas=1)
            third = p.core.preview_capacity("g2", delta_replicas=1)
        assert (first, second) == (Fits(groups=1), Fits(groups=1))
        assert isinstance(third, Insufficient) and third.groups_fitting == 0
        with p.core.batch():  # a new block starts from the cluster again
            assert p.core.preview_capacity("g2", delta_replicas=2) == Fits(groups=2)
            assert isinstance(p.core.preview_capacity("g0", delta_replicas=1), Insufficient)
    finally:
        p.close()


def test_a_block_places_the_cluster_once_per_kind_of_preview(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """The block's first preview reads and places the pods; the later previews of the same kind
    (the same usable nodes and queue rank) place their groups on what it left, with no read."""
    p = Pool(four_gpu_trio(), sqlite_url)
    reads: list[int] = []
    inner = p.core.holding_pods

    def holding_pods() -> list[Any]:
        reads.append(1)
        return inner()

    p.core.holding_pods = holding_pods  # type: ignore[method-assign]
    try:
        with p.core.batch():
            got = [p.core.preview_capacity(f"g{i}", delta_replicas=1) for i in range(3)]
        assert got[:2] == [Fits(groups=1)] * 2 and isinstance(got[2], Insufficient)
        assert got[2].free_by_node == {}  # the two fits hold the node's 8 GPUs
        assert len(reads) == 1  # one placement for the block (three before)
        with p.core.batch():  # a new block reads the cluster again
            assert p.core.preview_capacity("g2", delta_replicas=1) == Fits(groups=1)
        assert len(reads) == 2
    finally:
        p.close()


def test_a_fit_of_one_kind_is_counted_by_a_later_preview_of_another(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """g2's pods queue by their own priority class (another kind of preview, its own placement).
    g0 fits, then g2 (its placement built with g0's fit queued first), then g1: g1's kind had a
    placement from g0's preview, which g2's fit made stale, so it is built again and g1 does not
    fit — it would, on the stale one."""
    p = Pool(four_gpu_trio(), sqlite_url)
    try:
        p.patch("g2", {"spec": {"template": {"spec": {"priorityClassName": "gps-test-batch"}}}})
        with p.core.batch():
            first = p.core.preview_capacity("g0", delta_replicas=1)
            other = p.core.preview_capacity("g2", delta_replicas=1)
            last = p.core.preview_capacity("g1", delta_replicas=1)
        assert (first, other) == (Fits(groups=1), Fits(groups=1))
        assert isinstance(last, Insufficient) and last.groups_fitting == 0
    finally:
        p.close()


def start_schedule(deploy: str) -> dict[str, Any]:
    return {
        "name": f"run-{deploy}",
        "timezone": "UTC",
        "targets": [{"model_deploy_id": deploy, "default_state": "running"}],
        "windows": [],
    }


def test_one_pass_submits_the_fitting_acquires_together_and_the_rest_waits(
    k8s_cluster: str, sqlite_url: str
) -> None:
    p = Pool(four_gpu_trio(), sqlite_url)
    store = Store.open(sqlite_url)
    calls: list[list[str]] = []
    inner = p.core.submit_many

    def submit_many(subs: Sequence[Submission]) -> list[Operation | Exception]:
        calls.append([f"{s.kind.value}:{s.deploy_id}" for s in subs])
        return inner(subs)

    p.core.submit_many = submit_many  # type: ignore[method-assign]
    try:
        for i in range(3):
            store.apply_schedule(load_schedule(start_schedule(f"g{i}")), now=T0_K8S)
        store.set_gate("enforce", now=T0_K8S)
        Engine(store, p.core, p.clock, EngineConfig()).run_pass()
        assert calls == [["start:g0", "start:g1"]]  # one call, both fits; g2 previewed after them
        states = {a.deploy_id: a.state for a in store.list_actions()}
        assert states == {"g0": "accepted", "g1": "accepted", "g2": "capacity_wait"}
        p.cluster.settle()
        _, ns, _ = p.workload("g0")
        running = [
            x
            for x in p.admin.items(
                p.admin.core.list_namespaced_pod, ns, what="pods", label_selector=names.DEPLOY_ID
            )
            if pods.node(x) and not pods.deleting(x)
        ]
        assert sum(pods.gpus(x) for x in running) == 8  # two of them on the node, no more
    finally:
        store.engine.dispose()
        p.close()


def crowded() -> dict[str, Any]:
    """8 GPUs held by ``r``; three 4-GPU deploys that will be started by hand: unschedulable."""
    return {
        "name": "crowded",
        "nodes": [{"name": "n1", "gpus": 8}],
        "deploys": [
            {"id": "r", "gpus_per_replica": 8, "state": "running"},
            *({"id": f"u{i}", "gpus_per_replica": 4} for i in range(3)),
        ],
        "sim": {"timings": {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}},
    }


def test_one_read_of_many_unschedulable_deploys_lists_the_scale_up_events_once(
    k8s_cluster: str, sqlite_url: str
) -> None:
    p = Pool(crowded(), sqlite_url)
    try:
        for i in range(3):
            p.patch(f"u{i}", {"spec": {"replicas": 1}})
        deadline = time.monotonic() + 60
        while not all(p.core.get_deploy(f"u{i}").unschedulable for i in range(3)):
            assert time.monotonic() < deadline, "the scheduler never judged the pods"
            time.sleep(0.2)
        _, ns, _ = p.workload("u1")
        (pod,) = p.admin.items(
            p.admin.core.list_namespaced_pod,
            ns,
            what="u1 pod",
            label_selector=f"{names.DEPLOY_ID}=u1",
        )
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pods.name(pod)}.ca"},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": pods.name(pod)},
            "reason": "NotTriggerScaleUp",
            "message": "pod didn't trigger scale-up: 1 max node group size reached",
            "type": "Normal",
            "source": {"component": "cluster-autoscaler"},
            "lastTimestamp": "2026-10-19T10:00:00Z",
        }
        p.admin.call(p.admin.core.create_namespaced_event, ns, event, what="ev", mutating=True)
        listed: list[str] = []
        rest = p.api.api_client.rest_client
        inner = rest.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if method == "GET" and url.split("?")[0].endswith("/events"):
                listed.append(url)
            return inner(method, url, *args, **kwargs)

        rest.request = request
        views = p.core.get_deploys(["r", "u0", "u1", "u2"])
        assert len({p.workload(f"u{i}")[1] for i in range(3)}) == 1  # one namespace
        assert len(listed) == 2  # one LIST per scale-up reason, for the three deploys
        assert {d: v.scale_up for d, v in views.items()} == {
            "r": None,
            "u0": None,
            "u1": "not_triggered",
            "u2": None,
        }
    finally:
        p.close()
