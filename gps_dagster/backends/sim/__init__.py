"""The embedded simulated GPU pool: the default ``Core`` backend (demo, Dagster UI, tests).

``SimPool`` implements ``gps_dagster.ports.Core`` on top of the product's
database, with virtual-clock dynamics, foreign workloads and fault injection.
"""

from gps_dagster.backends.sim.core import SimPool
from gps_dagster.backends.sim.driver import UsagePoint, UsageSummary, summarize
from gps_dagster.backends.sim.faults import SimulatedCrash
from gps_dagster.backends.sim.snapshot import PoolSnapshot, snapshot

__all__ = [
    "PoolSnapshot",
    "SimPool",
    "SimulatedCrash",
    "UsagePoint",
    "UsageSummary",
    "snapshot",
    "summarize",
]
