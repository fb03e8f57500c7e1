"""The simulated GPU pool held in memory: ``MemoryPool``, ``SimPool``'s behaviour for one process.

A subpackage of the simulated-pool adapter: it shares every SQL-free piece of the
simulator (``backends.sim.pure``, the faults' rules, the mutation outcomes) and keeps
its rows as indexed records instead of SQL tables, so ``simulate`` pays no transaction
per call.
"""

from gps_dagster.backends.sim.memory.core import MemoryPool

__all__ = ["MemoryPool"]
