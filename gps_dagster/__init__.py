"""gps_dagster: share a GPU pool between model deployments by time of day.

Layers (checked by ``tests/test_layers.py``):

* ``gps_dagster.domain`` — pure: spec models, evaluator, planner, phases.
* ``gps_dagster.ports`` — the narrow ports the engine depends on.
* ``gps_dagster.store`` / ``gps_dagster.backends`` — adapters (SQLAlchemy, simulated pool,
  Kubernetes).
* ``gps_dagster.engine`` — the reconcile pass.
* ``gps_dagster.dagster_defs`` — the only importer of dagster.
* ``gps_dagster.cli`` — the ``gps-dagster`` command.
"""

__version__ = "0.1.0"
