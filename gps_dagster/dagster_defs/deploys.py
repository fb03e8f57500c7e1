"""Every managed deploy is its own asset, with a phase check (SPEC R-DAG-8).

A deploy named by a schedule's targets is an asset ``deploy/<deploy>`` in its schedule's group.
Whoever sees a status change first (the op that moved the step, or a sensor) records a runless
``AssetMaterialization`` (so the Catalog's Status column shows when the deploy last changed:
an observation showed "–" there) and an evaluation of its ``phase`` check
(``engine/status_views.py``). The executable checks are declared in chunks of ``CHECK_CHUNK``:
one ``multi_asset_check`` over 20,000 specs takes minutes to snapshot (quadratic in Dagster 1.13).
"""

# Decisions embodied here (docs/decisions.md):
# * “One asset per managed deploy, keyed `deploy/<deploy>`”
# * “A deploy's status change is a runless materialization, not an observation”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.engine import status_views
from gps_dagster.engine.intents import TargetStatusRow

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

CHECK_CHUNK = 200
SEVERITY = {"warn": dg.AssetCheckSeverity.WARN, "error": dg.AssetCheckSeverity.ERROR}


@dataclass
class DeployKeys:
    """The asset key of every managed deploy: readable, collision-safe over the known deploys."""

    schedule_of: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, targets: Iterable[tuple[str, str]]) -> DeployKeys:
        """From (schedule, deploy id) pairs."""
        return cls({deploy: schedule for schedule, deploy in targets})

    def _names(self, extra: str | None = None) -> dict[str, str]:
        known = list(self.schedule_of)
        return names.readable(known if extra is None or extra in known else [*known, extra])

    def key(self, deploy_id: str) -> dg.AssetKey:
        return dg.AssetKey([names.DEPLOY_KEY_PREFIX, self._names(deploy_id)[deploy_id]])

    def keys(self) -> dict[str, dg.AssetKey]:
        readable = self._names()
        return {d: dg.AssetKey([names.DEPLOY_KEY_PREFIX, n]) for d, n in readable.items()}


def deploy_keys(runtime: Runtime) -> DeployKeys:
    """The keys of the deploys the stored schedules claim (status rows: one per target)."""
    return DeployKeys.of((r.schedule, r.deploy_id) for r in runtime.intents.statuses())


LEAN_ABOVE = 1_000
"""Above this many managed deploys the assets are lean: no per-asset description or kind and
checks declared 1,000 per definition (at 20,000 deploys: ~60 MB less, the code location under
400 MB, bench/dagster_scale.py); the ``gps_deploy_checks`` job is dropped too (the UI still
executes each check)."""


def asset_specs(
    schedules: Sequence[Any],
    keys: DeployKeys,
    deps: Mapping[str, Sequence[dg.AssetKey]] | None = None,
) -> list[dg.AssetSpec]:
    """One observable asset per target of each schedule, grouped by schedule; ``deps`` are a
    deploy's upstream assets (its schedule, its reservations: ``lineage.py``)."""
    by_key = keys.keys()
    lean = len(by_key) > LEAN_ABOVE
    specs: list[dg.AssetSpec] = []
    for spec in schedules:
        for target in spec.targets:
            deploy = target.model_deploy_id
            rich: dict[str, Any] = (
                {}
                if lean
                else {
                    "description": f"Deploy {deploy} of schedule {spec.name}: its phase, reason, "
                    "fix, interval and intent (a materialization per change), and a phase check.",
                    "kinds": {"gpu"},
                }
            )
            specs.append(
                dg.AssetSpec(
                    by_key[deploy],
                    group_name=names.group_name(spec.name),
                    metadata={"deploy_id": deploy, "schedule": spec.name},
                    deps=list((deps or {}).get(deploy, ())),
                    **rich,
                )
            )
    return specs


def observation(row: TargetStatusRow, keys: DeployKeys) -> dg.AssetMaterialization:
    """The deploy's new state, recorded as a runless materialization of its asset."""
    return dg.AssetMaterialization(
        asset_key=keys.key(row.deploy_id),
        description=status_views.headline(row),
        metadata=status_views.status_metadata(row),
    )


def check_evaluation(row: TargetStatusRow, keys: DeployKeys) -> dg.AssetCheckEvaluation:
    """The deploy's ``phase`` check (``status_views.verdict``)."""
    return dg.AssetCheckEvaluation(**_phase_check(keys.key(row.deploy_id), row))


def _phase_check(key: dg.AssetKey, row: TargetStatusRow) -> dict[str, Any]:
    """The ``phase`` check of ``row``, for an evaluation (a sensor's) or a result (executed)."""
    v = status_views.verdict(row)
    return {
        "asset_key": key,
        "check_name": names.CHECK_DEPLOY_PHASE,
        "passed": v.passed,
        "severity": SEVERITY[v.level or "error"],
        "description": v.description,
        "metadata": dict(v.metadata),
    }


def status_events(
    rows: Iterable[TargetStatusRow], keys: DeployKeys
) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    out: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    for row in rows:
        out += [observation(row, keys), check_evaluation(row, keys)]
    return out


def report_deploy(
    instance: dg.DagsterInstance, runtime: Runtime, schedule: str, deploy_id: str
) -> TargetStatusRow | None:
    """Record the deploy's current status now (from an op: the UI need not wait for a sensor)."""
    row = runtime.intents.status(schedule, deploy_id)
    keys = deploy_keys(runtime)
    if row is not None:
        for event in status_events([row], keys):
            instance.report_runless_asset_event(event)
    return row


def build_deploy_checks(specs: Sequence[dg.AssetSpec]) -> list[dg.AssetChecksDefinition]:
    """The executable ``phase`` checks, ``CHECK_CHUNK`` deploys per definition (5 times more
    for a lean, large fleet)."""
    size = CHECK_CHUNK * 5 if len(specs) > LEAN_ABOVE else CHECK_CHUNK
    out = []
    for start in range(0, len(specs), size):
        chunk = specs[start : start + size]
        out.append(_checks(f"gps_deploy_phase_{start // size}", chunk))
    return out


def _checks(name: str, chunk: Sequence[dg.AssetSpec]) -> dg.AssetChecksDefinition:
    check_specs = [
        dg.AssetCheckSpec(
            names.CHECK_DEPLOY_PHASE,
            asset=s.key,
            description="Red (error) on a terminal phase, yellow (warn) on drift_detected.",
        )
        for s in chunk
    ]
    wanted: Mapping[dg.AssetKey, tuple[str, str]] = {
        s.key: (str(s.metadata["schedule"]), str(s.metadata["deploy_id"])) for s in chunk
    }

    @dg.multi_asset_check(
        name=name, specs=check_specs, can_subset=True, required_resource_keys={"gps"}
    )
    def phase_checks(context):  # type: ignore[no-untyped-def]  # dagster reads the hint
        intents = context.resources.gps.get_runtime().intents
        for check_key in context.selected_asset_check_keys:
            schedule, deploy = wanted[check_key.asset_key]
            row = intents.status(schedule, deploy)
            if row is None:
                yield dg.AssetCheckResult(
                    asset_key=check_key.asset_key,
                    check_name=names.CHECK_DEPLOY_PHASE,
                    passed=True,
                    description="no status yet: the engine has not seen it",
                )
                continue
            yield dg.AssetCheckResult(**_phase_check(check_key.asset_key, row))

    return phase_checks
