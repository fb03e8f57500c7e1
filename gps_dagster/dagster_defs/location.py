"""A code location importable from an installed wheel: ``dagster dev -m
gps_dagster.dagster_defs.location`` (or ``dagster definitions validate -m …``) from any folder.

The repository's ``definitions.py`` is the same plus the metrics server of the chart's code
location pod. Settings come from the environment as everywhere (``GPS_DB_URL`` — default
``var/gps.sqlite`` under the working directory —, ``GPS_POOL_FILE`` — default the packaged
seed pool —, ``GPS_BACKEND``, ``GPS_PREARM_LEAD_S``, ``GPS_RECONCILE_INTERVAL_S``).
"""

# Decisions embodied here (docs/decisions.md):
# * “Quiet terminal runs”
# * “The wheel ships the seed example; the default pool is the packaged copy”

import os
import warnings

import dagster as dg

from gps_dagster.dagster_defs import GpsResource, build_definitions
from gps_dagster.engine.prearm import lead_from_env

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

defs = build_definitions(
    GpsResource(prearm_lead_s=lead_from_env(os.environ)),
    reconcile_interval_s=int(os.environ.get("GPS_RECONCILE_INTERVAL_S", "30")),
)
