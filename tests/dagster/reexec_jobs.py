"""Reconstructable transition jobs for Dagster's own re-execution API (``execute_job``).

``dg.execute_job`` takes a ``ReconstructableJob``: a module-level function Dagster calls
again to rebuild the job. With the in-process executor it runs in this process, so the
function serves the runtime a test put in ``SERVED`` (a real store + simulated pool on a
virtual clock)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import StaticRuntime, build_definitions, names

SERVED: dict[str, Any] = {}


class _Served(StaticRuntime):
    """The runtime of the current test, read at each call: Dagster caches a reconstructed
    job per process (``ReconstructableJob.get_definition``), so the job must not hold one."""

    def __init__(self) -> None:
        super().__init__(None)

    def get_runtime(self) -> Any:
        return SERVED["runtime"]

    @property
    def capacity_poll_s(self) -> float:  # type: ignore[override]
        return float(SERVED.get("capacity_poll_s", 0.0))

    @capacity_poll_s.setter
    def capacity_poll_s(self, value: float) -> None:
        pass

    def sleep(self, seconds: float) -> None:
        SERVED["runtime"].clock.advance(seconds)


def _defs() -> dg.Definitions:
    return build_definitions(_Served(), schedules=[])


def transition_job() -> dg.JobDefinition:
    return _defs().resolve_job_def(names.TRANSITION_JOB)


def acquire_job() -> dg.JobDefinition:
    return _defs().resolve_job_def(names.ACQUIRE_JOB)


def reconstructable(job_name: str) -> Any:
    fn = {names.TRANSITION_JOB: transition_job, names.ACQUIRE_JOB: acquire_job}[job_name]
    return dg.reconstructable(fn)
