"""What the UI shows of each GPU reservation, between materialisations (R-DAG-4).

The reservation-partition sensor records, for every reservation whose state changed, an
observation of its ``gpu_reservations`` partition (node, GPU UUIDs, budget, each member with
its state, ``memory_mib`` and witnessed UUIDs) and the two checks' verdicts (placement witness,
VRAM budget), read from the ledger and the core: real figures within a tick, without waiting
for the ten-minute check schedule.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import dagster as dg

from gps_dagster.dagster_defs import names

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime


def _members(runtime: Runtime, reservation_id: str) -> list[dict[str, Any]]:
    out = []
    for deploy in runtime.core.reservation_deploys(reservation_id):
        binding = deploy.reservation
        uuids = list(runtime.core.witness(deploy.id).uuids) if deploy.ready_replicas else []
        out.append(
            {
                "deploy_id": deploy.id,
                "state": deploy.state.value,
                "memory_mib": getattr(binding, "memory_mib", None),
                "witnessed_uuids": ", ".join(uuids),
            }
        )
    return sorted(out, key=lambda m: m["deploy_id"])


def reservation_events(
    runtime: Runtime, reservation_ids: list[str], seen: dict[str, str]
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    """Events for the reservations whose members or verdicts changed since ``seen``."""
    from gps_dagster.engine import gps_checks as checks

    repo = runtime.intents.ledger()
    out: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
    for rid in reservation_ids:
        rsv = repo.get(rid)
        members = _members(runtime, rid)
        verdicts = {
            names.CHECK_PLACEMENT: checks.placement_check(repo, runtime.core, rid),
            names.CHECK_OVERCOMMIT: checks.overcommit_check(repo, runtime.core, rid),
        }
        state = json.dumps(
            [members, {k: (v.passed, v.description) for k, v in verdicts.items()}], sort_keys=True
        )
        digest = hashlib.sha1(state.encode()).hexdigest()
        if seen.get(rid) == digest:
            continue
        seen[rid] = digest
        out.append(
            dg.AssetObservation(
                asset_key=names.RESERVATIONS_ASSET,
                partition=rid,
                metadata={
                    "node": rsv.node,
                    "gpu_uuids": ", ".join(rsv.gpu_uuids),
                    "mode": str(rsv.mode.value),
                    "budget_mib": rsv.budget_mib,
                    "members": dg.MetadataValue.json(members),
                    "started": ", ".join(
                        m["deploy_id"] for m in members if m["state"] != "STOPPED"
                    ),
                },
            )
        )
        out += [
            dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey(names.RESERVATIONS_ASSET),
                check_name=check,
                passed=v.passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=f"{rid}: {v.description}"[:900],
                partition=rid,  # one verdict per reservation: another's never overwrites it
                metadata={k: str(x) for k, x in v.metadata.items()},
            )
            for check, v in verdicts.items()
        ]
    return out
