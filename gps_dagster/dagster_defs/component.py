"""gps_dagster as a Dagster Component (``dg``; SPEC R-DAG-10).

A ``defs.yaml`` in a dg project's defs folder::

    type: gps_dagster.dagster_defs.component.GpsComponent
    attributes:
      db_url: sqlite:///var/gps.sqlite       # the product store (None: $GPS_DB_URL)
      backend: sim                           # sim | kubernetes (None: $GPS_BACKEND)
      pool_file: ../../pool.yaml             # the simulated pool (relative to this folder)
      schedule_dir: schedules                # deploy schedule files (relative to this folder)

builds the same definitions as ``definitions.py`` (``build_definitions``): the files of
``schedule_dir`` are validated and applied to the store first (an unchanged file keeps its
version), then everything is compiled from the store. The component is registered under the
``dagster_dg_cli.registry_modules`` entry point, so ``dg list components`` shows it.
"""

# Decisions embodied here (docs/decisions.md):
# * “The Component applies its schedule folder at load”

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from gps_dagster.dagster_defs.resources import GpsResource
from gps_dagster.engine import schedule_folder


class GpsComponent(dg.Component, dg.Resolvable, dg.Model):
    """Deploy schedules sharing a GPU pool by time of day: transition jobs, boundary schedules,
    sensors, one asset per managed deploy with its phase check, reservations and the timeline."""

    db_url: str | None = Field(default=None, description="Product store URL ($GPS_DB_URL).")
    backend: str | None = Field(default=None, description="sim or kubernetes ($GPS_BACKEND).")
    pool_file: str | None = Field(
        default=None, description="Simulated pool file, relative to defs.yaml ($GPS_POOL_FILE)."
    )
    kubeconfig: str | None = Field(default=None, description="Kubeconfig (kubernetes).")
    schedule_dir: str | None = Field(
        default=None,
        description="Folder of deploy schedule files (JSON/YAML), relative to defs.yaml; each is "
        "validated and applied to the store when the code location loads.",
    )
    reconcile_interval_s: int = Field(default=30, description="Reconcile sensor interval.")

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from gps_dagster.dagster_defs import build_definitions

        here = Path(context.path)
        gps = GpsResource(
            db_url=self.db_url,
            backend=self.backend,
            pool_file=str(here / self.pool_file) if self.pool_file else None,
            kubeconfig=self.kubeconfig,
        )
        if self.schedule_dir:
            apply_schedule_dir(gps, here / self.schedule_dir)
        return build_definitions(gps, reconcile_interval_s=self.reconcile_interval_s)


def apply_schedule_dir(gps: GpsResource, folder: Path) -> list[str]:
    """Validate every file first, then apply them all (nothing is written when one is invalid)."""
    runtime = gps.get_runtime()
    try:
        specs = schedule_folder.parse_folder(folder)
    except schedule_folder.FolderInvalid as exc:
        raise dg.DagsterInvalidDefinitionError(str(exc)) from None
    now = runtime.clock.now()
    for path, spec in specs:
        runtime.intents.apply(spec, now=now, actor="dg-component", source=str(path))
    return [spec.name for _, spec in specs]
