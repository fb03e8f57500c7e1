"""The reconcile engine: gate, lock, paging, eligibility, plans, fence, convergence."""

from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.engine import Engine
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.reports import PassReport, PlanRef, StepOutcome, StepRef

__all__ = ["Busy", "Engine", "EngineConfig", "PassReport", "PlanRef", "StepOutcome", "StepRef"]
