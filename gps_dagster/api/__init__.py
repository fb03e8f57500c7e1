"""The schedule API and the timeline page (R-API): ``gps-dagster serve``.

A thin HTTP layer over the same store CRUD and engine calls the CLI makes
(``gps_dagster.engine.operations``). ``create_app(services)`` builds the ASGI
app; the edge (``cli/serve_cmd.py``) assembles ``ApiServices`` from the
runtime and runs it on uvicorn.
"""

from gps_dagster.api.app import create_app
from gps_dagster.api.limits import Limits
from gps_dagster.api.services import ApiServices

__all__ = ["ApiServices", "Limits", "create_app"]
