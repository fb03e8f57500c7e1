"""A FAKE of the ``gps_dagster.backends.k8s`` module, for the composition root's wiring tests.

The real Kubernetes adapter is tested against a real API server (issue 10). Here only the
composition root's side is under test: that ``GPS_BACKEND=kubernetes`` imports that module
lazily, calls its ``build_core(ledger=, clock=, kubeconfig=, context=, namespaces=)`` with the
settings, and hands the returned ``Core`` to the engine, the CLI and Dagster. So the fake
records each call and returns a real ``Core`` — the simulated pool — on the same store.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from gps_dagster.backends.sim import SimPool
from gps_dagster.domain.pool import parse_pool
from gps_dagster.ports import Core

MODULE = "gps_dagster.backends.k8s"
POOL = Path(__file__).resolve().parents[1] / "examples" / "seed-pool-10.yaml"


class FakeK8sBackend(types.ModuleType):
    """Stands in for the module; ``calls`` lists the keyword arguments of each ``build_core``."""

    def __init__(self, *, fail_with: BaseException | None = None) -> None:
        super().__init__(MODULE)
        self.calls: list[dict[str, Any]] = []
        self.cores: list[Core] = []
        self.fail_with = fail_with

    def build_core(self, **kwargs: Any) -> Core:
        self.calls.append(kwargs)
        if self.fail_with is not None:
            raise self.fail_with
        spec = parse_pool(POOL.read_text(), source=str(POOL))
        ledger = kwargs["ledger"]  # the store's reservation repository, from the composition root
        core = SimPool.create(ledger.engine, spec, kwargs["clock"], ledger=ledger)
        self.cores.append(core)
        return core
