"""The gps_dagster code location: ``dagster dev -f definitions.py``.

Zero setup: the product database is ``$GPS_DB_URL`` (default ``var/gps.sqlite``, created and
migrated on first load) and the simulated GPU pool comes from ``$GPS_POOL_FILE`` (default
``examples/seed-pool-10.yaml``), persisted in the same database and driven by the wall clock
(``$GPS_CLOCK`` gives tests a frozen instant; every setting is read by ``gps_dagster.runtime``).
Boundary schedules are compiled from the deploy schedules in the store when the code location loads;
``make demo`` (``python -m gps_dagster.demo``) applies a compressed demo schedule first.
``$GPS_RECONCILE_INTERVAL_S`` shortens the reconcile sensor's 30 s interval (tests, benchmark);
``$GPS_PREARM_LEAD_S`` sets how far ahead of a boundary its pre-armed run is launched (unset:
measured from the instance's run starts; 0 = off).
"""

import os
import warnings

import dagster as dg

from gps_dagster.dagster_defs import GpsResource, build_definitions
from gps_dagster.engine.prearm import lead_from_env

# Dagster's beta/preview notices about its own definitions are not the operator's business.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

defs = build_definitions(
    GpsResource(prearm_lead_s=lead_from_env(os.environ)),
    reconcile_interval_s=int(os.environ.get("GPS_RECONCILE_INTERVAL_S", "30")),
)

# In the code-location pod the chart sets GPS_METRICS_PORT: /metrics and /healthz for Prometheus.
from gps_dagster.cli.metrics_server import serve_from_env  # noqa: E402

metrics_server = serve_from_env()
