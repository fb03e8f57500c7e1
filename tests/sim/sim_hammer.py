"""Worker for the two-process test: start/stop random deploys of one pool, fast.

Run as ``python sim_hammer.py URL POOL SEED ITERATIONS``; prints a JSON summary.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.ports import AdmissionRefused, EtagMismatch, Transient
from gps_dagster.store.db import create_db_engine


def main(url: str, pool: str, seed: int, iterations: int) -> dict[str, int]:
    rng = random.Random(seed)
    clock = VirtualClock(datetime(2026, 10, 19, tzinfo=UTC))
    sim = SimPool.open(create_db_engine(url), pool, clock)
    ids = sim.deploy_ids()
    done = {"ops": 0, "refused": 0}
    for i in range(iterations):
        clock.advance(1)
        dep = rng.choice(ids)
        view = sim.get_deploy(dep)
        key = f"w{seed}-{i}"
        try:
            if view.state.value == "STOPPED":
                sim.start(dep, etag=view.etag, idempotency_key=key)
            else:
                sim.stop(dep, etag=view.etag, allow_aliased_downtime=False, idempotency_key=key)
            done["ops"] += 1
        except (EtagMismatch, AdmissionRefused, Transient):
            done["refused"] += 1
    return done


if __name__ == "__main__":
    url, pool, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(main(url, pool, seed, n)))
