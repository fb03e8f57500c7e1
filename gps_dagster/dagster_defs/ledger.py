"""What the UI shows of each GPU reservation, between materialisations (R-DAG-4).

The reservation-partition sensor records, for every reservation whose state changed, an
observation of its ``gpu_reservations`` partition (node, GPU UUIDs, budget, each member with
its state, ``memory_mib`` and witnessed UUIDs) and the two checks' verdicts (placement witness,
VRAM budget), read from the ledger and the core: real figures within a tick, without waiting
for the ten-minute check schedule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

from gps_dagster.dagster_defs import names

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime


def reservation_events(
    runtime: Runtime, reservation_ids: list[str], seen: dict[str, str]
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    """Events for the reservations whose members or verdicts changed since ``seen``
    (``Intents.reservation_changes``)."""
    out: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
    for view in runtime.intents.reservation_changes(reservation_ids, seen):
        rsv, members = view.reservation, view.members
        out.append(
            dg.AssetObservation(
                asset_key=names.RESERVATIONS_ASSET,
                partition=rsv.id,
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
                description=f"{rsv.id}: {v.description}"[:900],
                partition=rsv.id,  # one verdict per reservation: another's never overwrites it
                metadata={k: str(x) for k, x in v.metadata.items()},
            )
            for check, v in view.verdicts.items()
        ]
    return out
