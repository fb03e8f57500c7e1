"""Worker for the one-shot fault test: one ``get_deploy`` call on a shared pool.

Run as ``python fault_worker.py URL POOL DEPLOY``; prints ``{"fired": bool}``.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.ports import Transient
from gps_dagster.store.db import create_db_engine


def main(url: str, pool: str, deploy: str) -> dict[str, bool]:
    sim = SimPool.open(
        create_db_engine(url), pool, VirtualClock(datetime(2026, 10, 19, tzinfo=UTC))
    )
    print("ready", flush=True)
    try:
        sim.get_deploy(deploy)
    except Transient as exc:
        if exc.reason != "injected":
            raise
        return {"fired": True}
    return {"fired": False}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3])), flush=True)
