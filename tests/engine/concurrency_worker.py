"""One engine replica for ``test_concurrency``: run passes at shared virtual instants, log what it
saw.

Runs in its own process (multiprocessing ``spawn``). Every replica moves its
own ``VirtualClock`` through the same list of instants (``skew_s`` seconds
behind, for a replica whose clock lags: R-PASS-14) and meets the others at a
barrier before each pass, so the passes really start together. With
``lockless`` the replica's pass lock is always granted, as if its lock
connection had been lost: correctness must then come from the fence, the CAS
and the idempotency keys alone (SPEC R-PASS-2).
"""

from __future__ import annotations

import json
import traceback
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store


class GrantedLock:
    acquired = True

    def __enter__(self) -> GrantedLock:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class LockLostStore(Store):
    """The real store, except that this replica never sees the pass lock held."""

    def lock(self, name: str, *, holder: str, now: datetime, ttl_s: float = 120.0) -> Any:
        return GrantedLock()


def worker(
    url: str,
    pool: str,
    holder: str,
    instants: list[str],
    barrier: Any,
    out: str,
    lockless: bool,
    skew_s: float = 0.0,
) -> None:
    log: dict[str, Any] = {"holder": holder, "passes": [], "error": None}
    try:
        opened = Store.open(url, upgrade=False)
        store = LockLostStore(opened.engine) if lockless else opened
        behind = timedelta(seconds=skew_s)
        clock = VirtualClock(datetime.fromisoformat(instants[0]) - behind)
        engine = Engine(
            store, SimPool.open(store.engine, pool, clock), clock, EngineConfig(holder=holder)
        )
        for at in instants:
            clock.set(datetime.fromisoformat(at) - behind)
            barrier.wait(timeout=60)
            report = engine.run_pass()
            versions = {s.deploy_id: s.status_version for s in store.list_status()}
            log["passes"].append(
                {"at": at, "busy": report.busy, "steps": len(report.steps), "versions": versions}
            )
    except BaseException:  # record it for the test, and free the others from the barrier
        log["error"] = traceback.format_exc()
        barrier.abort()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(log, fh)
