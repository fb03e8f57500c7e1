"""The two GPS asset checks as plain functions (R-DAG-4): placement and overcommit.

The Dagster layer calls these with the reservation ledger (``ReservationRepository``)
and the core; they return a ``CheckOutcome`` it turns into an
``AssetCheckResult``. Kept here, free of Dagster and of the store, so the
results are real (read from the ledger and the core) and testable without a
Dagster instance:

* ``placement_check`` — every ready replica of every deploy bound to the
  reservation got GPUs inside its reservations (the witness, R-GPS-7);
* ``overcommit_check`` — Σ ``memory_mib`` of started members of a
  time-sliced reservation stays within its budget (R-GPS-3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gps_dagster.domain.gps.reservations import Reservation, SharingMode, format_mib
from gps_dagster.domain.gps.witness import Mismatch, judge
from gps_dagster.ports import DeployState, Placement


class LedgerReader(Protocol):
    def get(self, reservation_id: str) -> Reservation: ...
    def list(self, *, include_released: bool = True) -> Sequence[Reservation]: ...


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def reservation_ids(repo: LedgerReader) -> list[str]:
    """Ids of reservations still holding GPUs: the dynamic partitions of the reservation asset."""
    return sorted(r.id for r in repo.list(include_released=False))


def placement_check(repo: LedgerReader, core: Placement, reservation_id: str) -> CheckOutcome:
    """Passed when no ready replica of a bound deploy sits outside its reservations."""
    rsv = repo.get(reservation_id)
    witnessed: dict[str, list[str]] = {}
    bad: list[Mismatch] = []
    for deploy in core.reservation_deploys(reservation_id):
        if deploy.reservation is None:
            continue
        got = core.witness(deploy.id)
        if not got.uuids:
            continue
        allowed = {u for rid in deploy.reservation.reservation_ids for u in repo.get(rid).gpu_uuids}
        verdict = judge(
            got.uuids, "+".join(deploy.reservation.reservation_ids), allowed, source=got.source
        )
        witnessed[deploy.id] = list(got.uuids)
        if isinstance(verdict, Mismatch):
            bad.append(verdict)
    meta: dict[str, Any] = {
        "reservation": rsv.id,
        "node": rsv.node,
        "reserved_uuids": ", ".join(rsv.gpu_uuids),
        "witnessed": "; ".join(f"{d}: {', '.join(u)}" for d, u in sorted(witnessed.items())),
        "mismatches": len(bad),
    }
    if bad:
        meta["fix"] = bad[0].fix
        outside = ", ".join(u for m in bad for u in m.outside)
        return CheckOutcome(False, f"placement_mismatch: {outside} outside '{rsv.id}'", meta)
    if not witnessed:
        return CheckOutcome(
            True, f"no ready replica bound to '{rsv.id}' yet: nothing to witness", meta
        )
    return CheckOutcome(
        True, f"{len(witnessed)} deploy(s) on '{rsv.id}': every UUID inside the reservation", meta
    )


def overcommit_check(repo: LedgerReader, core: Placement, reservation_id: str) -> CheckOutcome:
    """Passed when started time-sliced members fit the VRAM budget (exclusive: no budget)."""
    rsv = repo.get(reservation_id)
    if rsv.mode is not SharingMode.TIME_SLICED:
        return CheckOutcome(
            True,
            f"'{rsv.id}' is exclusive: whole GPUs, no VRAM budget",
            {"reservation": rsv.id, "mode": rsv.mode.value},
        )
    started = {
        d.id: d.reservation.memory_mib or 0
        for d in core.reservation_deploys(reservation_id)
        if d.reservation is not None and d.state is not DeployState.STOPPED
    }
    total = sum(started.values())
    meta: dict[str, Any] = {
        "reservation": rsv.id,
        "budget_mib": rsv.budget_mib,
        "started_mib": total,
        "free_mib": rsv.budget_mib - total,
        "members": ", ".join(f"{d}={m}" for d, m in sorted(started.items())),
    }
    figures = f"{format_mib(total)} of {format_mib(rsv.budget_mib)} MiB"
    if total > rsv.budget_mib:
        meta["fix"] = "lower memory_mib or stop a member of the reservation, then apply-now"
        return CheckOutcome(False, f"reservation_overcommitted: {figures}", meta)
    return CheckOutcome(True, f"within budget: {figures}", meta)
