"""Engine replicas of ``test_takeover``, each in its own process (multiprocessing ``spawn``).

``victim`` claims a chunk of the storm and hangs inside its first stop (a core call that never
returns, as a replica frozen mid-pass), after writing ``ready``: the test then SIGKILLs it, a
real ``kill -9``. ``survivor`` runs passes at shared virtual instants (a barrier before each,
so the survivors' passes overlap) and logs, per pass, the steps it moved.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.ports import Operation, Submission, submit_each
from gps_dagster.store import Store

CHUNK = 10


class HangingCore:
    """The real simulated pool, except that a stop never returns (it marks ``ready`` first)."""

    def __init__(self, inner: Any, ready: Path) -> None:
        self._inner, self._ready = inner, ready

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        return submit_each(self, submissions)  # every call through this wrapper

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stop(self, deploy_id: str, **kw: Any) -> Any:
        self._ready.write_text(deploy_id)
        while True:  # frozen until the test's SIGKILL
            time.sleep(3600)


def victim(url: str, pool: str, at: str, ready: str) -> None:
    store = Store.open(url, upgrade=False)
    clock = VirtualClock(datetime.fromisoformat(at))
    core = HangingCore(SimPool.open(store.engine, pool, clock), Path(ready))
    config = EngineConfig(holder="victim", due_batch=CHUNK)
    Engine(store, core, clock, config).run_pass()  # type: ignore[arg-type]


def survivor(url: str, pool: str, holder: str, instants: list[str], barrier: Any, out: str) -> None:
    log: dict[str, Any] = {"holder": holder, "passes": [], "error": None}
    try:
        store = Store.open(url, upgrade=False)
        clock = VirtualClock(datetime.fromisoformat(instants[0]))
        config = EngineConfig(holder=holder, due_batch=CHUNK)
        engine = Engine(store, SimPool.open(store.engine, pool, clock), clock, config)
        for at in instants:
            clock.set(datetime.fromisoformat(at))
            barrier.wait(timeout=120)
            report = engine.run_pass()
            log["passes"].append({"at": at, "steps": len(report.steps), "errors": report.errors})
    except BaseException:  # recorded for the test; the others are freed from the barrier
        log["error"] = traceback.format_exc()
        barrier.abort()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(log, fh)
