"""Engine settings: every wait has a clock (SPEC non-negotiable: no hang, ever)."""

# Decisions embodied here (docs/decisions.md):
# * “Per-process lock holders”
# * “Due claims: a 15 s lease renewed on a heartbeat, taken in chunks of 50”

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field


def default_holder() -> str:
    """A lock holder name unique to this process (the SQLite lease tells holders apart by it)."""
    return f"engine@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    pass_interval_s: float = 30.0
    """Seconds between passes of ``engine run`` (the seed's figure)."""
    page_size: int = 100
    """Schedules visited per pass from the durable cursor (R-PASS-3)."""
    capacity_wait_s: float = 900.0
    """Capacity wait past the nominal start before ``capacity_unavailable`` (R-PASS-9)."""
    stop_timeout_s: float = 600.0
    """Release step convergence limit before ``stop_timeout``."""
    readiness_timeout_s: float = 1800.0
    """Acquire step readiness limit before ``readiness_timeout``."""
    unschedulable_grace_s: float = 120.0
    """How long pods may stay unschedulable before ``start_unschedulable``."""
    crash_loop_restarts: int = 3
    """A converged running target whose container waits in ``CrashLoopBackOff`` after this many
    restarts ends ``crash_loop`` (about 40 s of the kubelet's back-off: 0, 10, 20 s)."""
    max_clock_skew_s: float = 5.0
    """Clock skew between replicas that is expected and silent (R-PASS-14); a replica further
    behind a stored interval still plans nothing, and emits a ``clock_skew`` event."""
    lock_ttl_s: float = 120.0
    """Lease length of the SQLite pass lock (PostgreSQL uses a session advisory lock)."""
    due_batch: int = 50
    """Due schedules claimed and served together (one batch of reads and writes): a bounded
    chunk, so that replicas share a storm instead of one of them claiming all of it (R-NEXT-4)."""
    follow_up_s: float = 2.0
    """A schedule with steps in flight is due again this soon while the gate enforces (steps
    accepted are observed, capacity waits re-previewed); otherwise after ``pass_interval_s``."""
    claim_ttl_s: float = 15.0
    """The lease of a replica's claims on due schedules: renewed every third of it by a
    heartbeat while the replica serves them, so a crashed replica's claims expire (and a
    survivor takes them over) within this many seconds. 15 s is Kubernetes' own leader-election
    lease (client-go ``LeaseDuration``); R-NEXT-4."""
    retention_days: float = 30.0
    """Finished plans, steps and events older than this are pruned (``db prune``, the loop)."""
    prune_interval_s: float = 3600.0
    """How often ``engine run`` prunes on its own (0: never)."""
    ready_by_default_start_s: float = 300.0
    """Ready-by (R-NEXT-1): a deploy's start time (accepted -> READY) before any is observed."""
    ready_by_default_stop_s: float = 60.0
    """Ready-by: a releasing deploy's stop time (accepted -> STOPPED) before any is observed."""
    ready_by_cap_s: float = 1800.0
    """Ready-by: the longest lead (start + stop); a learned figure above it is capped."""
    ready_by_history: int = 20
    """Ready-by: the p90 is taken over this many of a deploy's last observed durations."""
    holder: str = field(default_factory=default_holder)
    """Name of this engine replica (lease holder, event detail)."""
