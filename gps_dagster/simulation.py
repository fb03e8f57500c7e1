"""Replay a range on the virtual clock through the real engine and the simulated pool.

``gps-dagster simulate`` and ``make demo``'s report use this: the engine runs
its passes exactly as in production (every ``pass_interval_s``, or woken at
the next boundary), while the driver also wakes at every simulator event
(pods terminated, capacity published, replicas ready) to sample the pool,
so downtime and GPU-idle figures are exact rather than tick-rounded.

Samples and the report read the pool as an observer (``SimPool.observe``), so
they neither consume nor trip over faults meant for the engine. A ``crash``
fault kills the engine process mid-pass: the replay continues as production
would, with a new engine process (another lock holder, so it waits out the
dead one's lease) on the same store and pool, and reports every restart.
"""

# Decisions embodied here (docs/decisions.md):
# * “Simulation figures”
# * “`simulate` replays a `crash` fault as an engine restart”
# * “The engine's store in memory: the same semantics, translated method by method”

from __future__ import annotations

import bisect
import dataclasses
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine as DbEngine

from gps_dagster.backends.sim import SimPool, SimulatedCrash
from gps_dagster.backends.sim.ledger import SharedLedger
from gps_dagster.backends.sim.memory import MemoryPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.evaluator import intervals, next_boundary
from gps_dagster.domain.occurrences import floor_ts
from gps_dagster.domain.pool import PoolSpec
from gps_dagster.domain.spec import DesiredState, Schedule
from gps_dagster.domain.step_state import Gate
from gps_dagster.domain.timeline import gpu_timeline
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.endpoints import aggregate
from gps_dagster.engine.engine import IN_FLIGHT, Engine
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.ports import DeployState, DeployView
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.memory import MemoryStore
from gps_dagster.store.repository import Store
from gps_dagster.store.reservations import ReservationRepository

SimStore = Store | MemoryStore
"""The engine's store of a replay: in memory (the default), or the SQL one."""
Pool = SimPool | MemoryPool
"""The simulated pool of a replay: in memory (the default), or in the database."""


@dataclass
class Sample:
    at: datetime
    ready: dict[str, int]
    """Ready replica groups per target."""


@dataclass
class SimulationReport:
    schedule: str
    pool: str
    start: datetime
    end: datetime
    capacity: int
    events: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    final_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu_usage: list[dict[str, Any]] = field(default_factory=list)
    max_gpus_in_use: int = 0
    max_gpus_desired: int = 0
    downtime_seconds: dict[str, float] = field(default_factory=dict)
    gpu_idle_seconds: float = 0.0
    boundary_lag_seconds: list[float] = field(default_factory=list)
    passes: int = 0
    operations: list[dict[str, Any]] = field(default_factory=list)
    witness: dict[str, list[str]] = field(default_factory=dict)
    """Reservation-bound targets: GPU UUIDs their ready replicas hold at the end (R-GPS-7)."""
    restarts: list[dict[str, Any]] = field(default_factory=list)
    """Engine restarts after a ``crash`` fault: when, and where the process died."""
    ready_by: list[dict[str, Any]] = field(default_factory=list)
    """Ready-by leads (R-NEXT-1): per early plan the boundary, the early start, the lead, when
    each acquiring target was READY, and the GPU-hours each releasing target gave up early."""

    def as_dict(self) -> dict[str, Any]:
        tz = self.start.tzinfo

        def iso(v: Any) -> Any:
            return v.astimezone(tz).isoformat() if isinstance(v, datetime) else v

        def conv(obj: Any) -> Any:
            if isinstance(obj, dict):
                return {k: conv(v) for k, v in obj.items()}
            if isinstance(obj, list):
                return [conv(v) for v in obj]
            return iso(obj)

        out: dict[str, Any] = conv(
            {
                "schedule": self.schedule,
                "pool": self.pool,
                "from": self.start,
                "to": self.end,
                "capacity": self.capacity,
                "max_gpus_in_use": self.max_gpus_in_use,
                "max_gpus_desired": self.max_gpus_desired,
                "downtime_seconds": self.downtime_seconds,
                "gpu_idle_seconds": self.gpu_idle_seconds,
                "boundary_lag_seconds": self.boundary_lag_seconds,
                "passes": self.passes,
                "final_status": self.final_status,
                "transitions": self.transitions,
                "events": self.events,
                "gpu_usage": self.gpu_usage,
                "operations": self.operations,
                "witness": self.witness,
                "engine_restarts": self.restarts,
                "ready_by": self.ready_by,
            }
        )
        return out


def simulate(
    schedule: Schedule,
    pool_spec: PoolSpec,
    start: datetime,
    end: datetime,
    *,
    config: EngineConfig | None = None,
    db_url: str | None = None,
    wake_at_boundaries: bool = True,
    setup: Any = None,
    memory_store: bool | None = None,
    memory_pool: bool | None = None,
) -> SimulationReport:
    """Run the engine over [start, end) on a virtual clock; ``setup(pool, store)`` may inject
    faults.

    By default the replay keeps everything in memory: the engine's store is a ``MemoryStore``
    and the pool a ``MemoryPool``, each deciding exactly as its SQL twin does (the replay tests
    compare whole reports) without a database transaction per call. ``db_url`` replays on the
    SQL ``Store`` and a ``SimPool`` in that database instead (to keep or inspect it);
    ``memory_store``/``memory_pool`` choose each part explicitly.
    """
    in_memory = db_url is None
    memory_store = in_memory if memory_store is None else memory_store
    memory_pool = in_memory if memory_pool is None else memory_pool
    config = config or EngineConfig()
    clock = VirtualClock(start)
    with tempfile.TemporaryDirectory(prefix="gps-sim-") as tmp:
        url = db_url or f"sqlite:///{Path(tmp) / 'sim.sqlite'}"
        store: SimStore
        db: DbEngine | None = None
        ledger: SharedLedger
        if memory_store:
            store = MemoryStore(clock)
            ledger = store.ledger()
        else:
            store = Store.open(url)
            db, ledger = store.engine, ReservationRepository(store.engine)
        pool: Pool
        if memory_pool:
            pool = MemoryPool.create(pool_spec, clock, ledger=ledger)
        else:
            db = db or create_db_engine(url)
            pool = SimPool.create(db, pool_spec, clock, replace=True, ledger=ledger)
        store.apply_schedule(schedule, now=start)
        store.set_gate(Gate.ENFORCE, now=start)
        if setup is not None:
            setup(pool, store)
        restarts: list[dict[str, Any]] = []
        engines = _Engines(store, pool, clock, config, restarts)
        samples, passes = _drive(engines, pool, schedule, clock, end, config, wake_at_boundaries)
        report = _report(store, pool, schedule, pool_spec, start, end, samples)
        report.passes, report.restarts = passes, restarts
        if db is not None:
            db.dispose()
        return report


class _Engines:
    """The engine process of the replay; a simulated crash replaces it with a new one."""

    def __init__(
        self,
        store: SimStore,
        pool: Pool,
        clock: VirtualClock,
        config: EngineConfig,
        restarts: list[dict[str, Any]],
    ) -> None:
        self.store, self.pool, self.clock, self.config = store, pool, clock, config
        self.restarts = restarts
        self.engine = self._start(config)

    def _start(self, config: EngineConfig) -> Engine:
        return Engine(self.store, self.pool, self.clock, config, **hooks(self.store, self.pool))

    def run_pass(self) -> None:
        try:
            self.engine.run_pass()
        except SimulatedCrash as crash:
            self.restarts.append({"at": self.clock.now(), "op": crash.op, "point": crash.point})
            holder = f"{self.config.holder}-restart-{len(self.restarts)}"
            self.engine = self._start(dataclasses.replace(self.config, holder=holder))


def _drive(
    engines: _Engines,
    pool: Pool,
    schedule: Schedule,
    clock: VirtualClock,
    end: datetime,
    config: EngineConfig,
    wake_at_boundaries: bool,
) -> tuple[list[Sample], int]:
    tick = timedelta(seconds=config.pass_interval_s)
    samples: list[Sample] = []
    next_pass = clock.now()
    passes = 0
    while clock.now() < end:
        now = clock.now()
        if now >= next_pass:
            engines.run_pass()
            passes += 1
            in_flight = engines.store.list_actions(states=IN_FLIGHT)
            next_pass = now + tick
            if wake_at_boundaries and not in_flight:
                nb = _next_wake(engines, schedule, now)
                next_pass = nb if nb is not None else end
        sim_next = pool.settle()
        samples.append(Sample(now, _ready(pool, schedule)))
        wake = min(x for x in (next_pass, sim_next, end) if x is not None and x > now)
        clock.set(wake)
    return samples, passes


def _next_wake(engines: _Engines, schedule: Schedule, now: datetime) -> datetime | None:
    """The next boundary, or the ready-by early start before it (R-NEXT-1)."""
    nb = next_boundary(schedule, now)
    early = engines.engine.planner.ready_by.next_early(engines.store, schedule, now)
    return min(x for x in (nb, early) if x is not None) if (nb or early) else None


def _ready(pool: Pool, schedule: Schedule) -> dict[str, int]:
    """Ready replica groups per target; a CMP endpoint target is the aggregate of its members."""
    out = {}
    for target, d in _targets(pool.observe(), schedule).items():
        out[target] = (
            d.ready_replicas if d.state in (DeployState.READY, DeployState.UPDATING) else 0
        )
    return out


def _targets(deploys: dict[str, DeployView], schedule: Schedule) -> dict[str, DeployView]:
    """Each target's view: its deploy, or the aggregate of its endpoint's members."""
    out = {}
    for target in schedule.target_ids:
        members = tuple(d for d in deploys.values() if d.endpoint == target)
        if target in deploys:
            out[target] = deploys[target]
        elif members:
            out[target] = aggregate(target, members)
    return out


def _report(
    store: SimStore,
    pool: Pool,
    schedule: Schedule,
    pool_spec: PoolSpec,
    start: datetime,
    end: datetime,
    samples: list[Sample],
) -> SimulationReport:
    rep = SimulationReport(schedule.name, pool_spec.name, start, end, pool_spec.capacity)
    rep.events = [
        {"at": e.at, "target": e.deploy_id, "kind": e.kind, "phase": e.phase, "reason": e.reason}
        for e in store.list_events(limit=1_000_000)
        if e.deploy_id is not None
    ]
    for tr in store.list_transitions():
        steps = [
            {
                "step": a.step,
                "target": a.deploy_id,
                "order": a.order,
                "state": a.state,
                "reason": a.reason,
                "submitted_at": a.submitted_at,
                "accepted_at": a.accepted_at,
                "finished_at": a.finished_at,
            }
            for a in store.list_actions(transition_id=tr.id)
        ]
        rep.transitions.append(
            {
                "id": tr.id,
                "boundary": tr.boundary_at,
                "opened_at": tr.created_at,
                "state": tr.state,
                "targets": tr.targets,
                "steps": steps,
            }
        )
        submits = [
            a.submitted_at
            for a in store.list_actions(transition_id=tr.id)
            if a.order == "release" and a.submitted_at
        ]
        first = min(submits, default=None)
        if (
            first is not None and tr.boundary_at >= start
        ):  # boundaries before the replay are not lag
            rep.boundary_lag_seconds.append((first - tr.boundary_at).total_seconds())
    rep.final_status = {
        s.deploy_id: {"phase": s.phase, "reason": s.reason, "fix": s.fix}
        for s in store.list_status(schedule.name)
    }
    usage = [p for p in pool.usage_history() if p.at < end]
    rep.gpu_usage = [
        {
            "at": max(p.at, start),
            "in_use": p.total_in_use,
            "by_holder": p.in_use,
            "terminating": p.terminating,
            "unpublished": p.unpublished,
            "free": p.free,
        }
        for p in usage
    ]
    for item, p in zip(rep.gpu_usage, usage, strict=True):
        if p.shared:
            item["shared"] = (
                p.shared
            )  # fractional pods per time-sliced reservation (holder included)
    deploys = pool.observe()
    rep.witness = {
        t: list(pool.witness(t).uuids)
        for t in schedule.target_ids
        if (d := deploys.get(t)) is not None and d.reservation
    }
    rep.max_gpus_in_use = max((p.total_in_use for p in usage), default=0)
    timeline = gpu_timeline(schedule, pool_spec, start, end)
    rep.max_gpus_desired = max((g.desired_gpus for g in timeline), default=0)
    rep.downtime_seconds = _downtime(schedule, pool_spec, samples, end)
    rep.gpu_idle_seconds = _idle(rep, usage, timeline, end)
    rep.operations = [
        {
            "id": o.id,
            "deploy": o.deploy_id,
            "kind": o.kind.value,
            "key": o.idempotency_key,
            "at": o.created_at,
        }
        for o in pool.operation_log()
    ]
    rep.ready_by = _ready_by(store, pool_spec, rep.transitions)
    return rep


def _ready_by(
    store: SimStore, pool_spec: PoolSpec, transitions: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The idle report of ready-by: what each early plan cost its releasing targets in GPU-hours."""
    out = []
    leads = {}
    for e in store.list_events(limit=1_000_000):
        if e.kind == "ready_by_lead" and e.detail:
            leads[(e.detail["boundary"], e.schedule)] = e.detail
    for tr in transitions:
        lead = next(
            (d for (b, _), d in leads.items() if datetime.fromisoformat(b) == tr["boundary"]), None
        )
        if lead is None:
            continue
        ready = {s["target"]: s["finished_at"] for s in tr["steps"] if s["order"] == "acquire"}
        lost = {}
        for s in tr["steps"]:
            spec = pool_spec.deploy(s["target"])
            if s["order"] == "release" and s["accepted_at"] is not None and spec is not None:
                early_s = max(0.0, (tr["boundary"] - s["accepted_at"]).total_seconds())
                lost[s["target"]] = {
                    "stopped_early_s": early_s,
                    "gpu_hours": early_s * spec.gpus_per_replica / 3600,
                }
        out.append(
            {
                "boundary": tr["boundary"],
                "early_start": datetime.fromisoformat(lead["early_start"]),
                "lead_s": lead["lead_s"],
                "reason": lead["reason"],
                "ready_at": ready,
                "releasing": lost,
            }
        )
    return out


def _downtime(
    schedule: Schedule, pool_spec: PoolSpec, samples: list[Sample], end: datetime
) -> dict[str, float]:
    """Seconds an aliased target's intent was running while it had no ready replica."""
    aliased = [
        t
        for t in schedule.target_ids
        if any(d.aliases for d in (pool_spec.deploy(t), *pool_spec.members(t)) if d is not None)
    ]
    out = {t: 0.0 for t in aliased}
    if not aliased or not samples:
        return out
    running = {  # each target's intervals of a running intent, walked once with the samples
        t: [
            (floor_ts(iv.start), floor_ts(iv.end))
            for iv in ivs
            if iv.end is not None and iv.intent.desired_state is DesiredState.RUNNING
        ]
        for t, ivs in intervals(
            schedule,
            samples[0].at,
            max(end, samples[-1].at + timedelta(seconds=1)),
            targets=aliased,
        ).items()
    }
    at = {t: 0 for t in aliased}
    for here, nxt in zip(samples, [*samples[1:], None], strict=True):
        stop = nxt.at if nxt is not None else end
        ts = floor_ts(here.at)  # the instant effective_intent evaluates
        for t in aliased:
            spans = running[t]
            while at[t] < len(spans) and spans[at[t]][1] <= ts:
                at[t] += 1
            wants = at[t] < len(spans) and spans[at[t]][0] <= ts
            if wants and here.ready.get(t, 0) == 0:
                out[t] += (stop - here.at).total_seconds()
    return out


def _idle(rep: SimulationReport, usage: list[Any], timeline: list[Any], end: datetime) -> float:
    """GPU-seconds, inside swap windows, that the desired line wanted but nothing held."""
    windows: list[tuple[datetime, datetime]] = sorted(
        (tr["boundary"], max((s["finished_at"] or end) for s in tr["steps"]))
        for tr in rep.transitions
        if tr["steps"] and tr["boundary"].year > 1970
    )
    starts = [a for a, _ in windows]
    longest = max((b - a for a, b in windows), default=timedelta(0))
    segment_starts = [g.start for g in timeline]  # the timeline's segments are in time order
    total = 0.0
    for here, nxt in zip(usage, [*usage[1:], None], strict=True):
        stop = nxt.at if nxt is not None else end
        k = bisect.bisect_right(segment_starts, here.at) - 1
        g = timeline[k] if k >= 0 else None
        wanted = g.desired_gpus if g is not None and g.start <= here.at < g.end else 0
        gap = max(0, min(wanted, rep.capacity) - here.total_in_use)
        if not gap:
            continue
        # only the windows that can overlap [here.at, stop): started before stop, not before
        # here.at minus the longest window
        for a, b in windows[
            bisect.bisect_left(starts, here.at - longest) : bisect.bisect_left(starts, stop)
        ]:
            lo, hi = max(a, here.at), min(b, stop)
            if hi > lo:
                total += gap * (hi - lo).total_seconds()
    return total
