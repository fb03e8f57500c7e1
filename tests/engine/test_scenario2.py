"""Reference scenario 2 (SPEC §7): 16 GPUs, A swings 2 <-> 1 replicas, md-qwen-8gpu fills the gap.

At 08:00 md-qwen-8gpu stops (release) and A scales 1 -> 2 onto the node it
freed; at 18:00 A scales 2 -> 1 (release, ``capacity_reduced``) and
md-qwen-8gpu starts on the node A handed back. A serves throughout, and every
acquiring step previews capacity for its delta only (one replica group).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gps_dagster.backends.sim import SimPool, snapshot
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import CapacityPreview
from gps_dagster.simulation import simulate
from tests.engine.harness import World, example, jump, local, make_world, op_triples

A, Q = "md-llama70b", "md-qwen-8gpu"


class RecordingCore:
    """The real pool, with every ``preview_capacity(deploy, delta)`` call written down."""

    def __init__(self, pool: SimPool) -> None:
        self._pool = pool
        self.previews: list[tuple[str, int]] = []

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        self.previews.append((deploy_id, delta_replicas))
        return self._pool.preview_capacity(deploy_id, delta_replicas=delta_replicas)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def scenario2(url: str) -> tuple[World, RecordingCore]:
    w = make_world(
        url,
        schedule=example("scenario2-schedule.json"),
        pool=example("seed-pool-16.yaml"),
        start=local("2026-10-19T07:59:30"),
    )
    core = RecordingCore(w.pool)
    w.engine = Engine(w.store, core, w.clock, EngineConfig())  # type: ignore[arg-type]
    return w, core


def nodes_of(w: World, holder: str) -> set[str]:
    return {g.node for g in snapshot(w.pool).gpus if g.holder == holder and g.state == "held"}


def serve_through(w: World, until_iso: str) -> list[int]:
    """Passes every 30 s until ``until``; A's ready replica groups after each."""
    ready = []
    while w.clock.now() < local(until_iso):
        w.tick(30)
        ready.append(w.deploy(A).ready_replicas)
    return ready


def test_a_has_zero_downtime_over_a_weekday() -> None:
    start = local("2026-10-19T00:00")
    spec = load_schedule(example("scenario2-schedule.json"))
    rep = simulate(spec, load_pool(example("seed-pool-16.yaml")), start, start + timedelta(days=1))
    assert rep.downtime_seconds == {A: 0.0}
    assert rep.max_gpus_in_use <= 16
    assert [(o["deploy"], o["kind"]) for o in rep.operations] == [
        (Q, "stop"),
        (A, "set_replica_intent"),
        (A, "set_replica_intent"),
        (Q, "start"),
    ]
    reduced = [e for e in rep.events if e["kind"] == "capacity_reduced"]
    assert [(e["target"], e["at"]) for e in reduced] == [(A, local("2026-10-19T18:00"))]
    assert {s["phase"] for s in rep.final_status.values()} == {"converged"}


def test_both_swaps_hand_node_two_over_and_preview_only_the_delta(sqlite_url: str) -> None:
    w, core = scenario2(sqlite_url)
    assert nodes_of(w, A) == {"hgx-01"} and nodes_of(w, Q) == {"hgx-02"}

    ready = serve_through(w, "2026-10-19T08:06")  # 08:00: stop Q, then A 1 -> 2 on hgx-02
    assert min(ready) >= 1 and ready[-1] == 2
    assert nodes_of(w, A) == {"hgx-01", "hgx-02"} and nodes_of(w, Q) == set()

    jump(w, local("2026-10-19T17:59:30"))
    ready = serve_through(w, "2026-10-19T18:06")  # 18:00: A 2 -> 1, then Q starts on the freed node
    assert min(ready) >= 1 and ready[-1] == 1
    assert nodes_of(w, A) == {"hgx-01"} and nodes_of(w, Q) == {"hgx-02"}

    assert core.previews and {d for d, _ in core.previews} == {A, Q}
    assert {delta for _, delta in core.previews} == {
        1
    }  # the delta (one 8-GPU group), never the whole deploy
    assert [(d, k) for d, k, _ in op_triples(w)] == [
        (Q, "stop"),
        (A, "set_replica_intent"),
        (A, "set_replica_intent"),
        (Q, "start"),
    ]
    intents = [o.replicas for o in w.pool.operation_log() if o.deploy_id == A]
    assert intents == [2, 1]
    a = w.deploy(A)
    assert (a.desired_replicas, a.role_min, a.role_max) == (1, 1, 1)  # R-SCALE-3: roles follow
    assert w.status(A).phase == "converged" and w.status(Q).phase == "converged"


def test_starting_a_stopped_deploy_with_other_replicas_persists_them_first(sqlite_url: str) -> None:
    """R-SCALE-5: SetReplicaIntent on a STOPPED deploy is persist-only; a fresh ETag, then Start."""
    pool = example("seed-pool-16.yaml")
    for dep in pool["deploys"]:
        dep["state"] = "stopped"
    w = make_world(
        sqlite_url,
        schedule=example("scenario2-schedule.json"),
        pool=pool,
        start=local("2026-10-19T08:00"),
    )
    core = RecordingCore(w.pool)
    w.engine = Engine(w.store, core, w.clock, EngineConfig())  # type: ignore[arg-type]
    serve_through(w, "2026-10-19T08:05")
    persist, start = w.pool.operation_log()
    assert (persist.deploy_id, persist.kind.value, persist.replicas, persist.persist_only) == (
        A,
        "set_replica_intent",
        2,
        True,
    )
    assert (start.deploy_id, start.kind.value) == (A, "start")
    assert start.idempotency_key == persist.idempotency_key.removesuffix("/persist")
    assert set(core.previews) == {(A, 2)}  # a stopped deploy needs all its groups
    a = w.deploy(A)
    assert (a.state.value, a.ready_replicas, a.role_max) == ("READY", 2, 2)
    assert w.status(A).phase == "converged"
