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

``ledger_verdict`` runs one check over the whole ledger (the asset check's verdict);
``reservation_view`` is what the UI shows of one reservation between materialisations (its
members and both verdicts), with a digest that says whether it changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
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


PLACEMENT = "placement_mismatch"
OVERCOMMIT = "reservation_overcommitted"
CHECKS: dict[str, Callable[[LedgerReader, Placement, str], CheckOutcome]] = {
    PLACEMENT: placement_check,
    OVERCOMMIT: overcommit_check,
}
"""The two checks by name (the names of their asset checks)."""


def ledger_verdict(repo: LedgerReader, core: Placement, which: str) -> CheckOutcome:
    """Check ``which`` on every reservation of the ledger: failed when any reservation fails
    (the description: the first failure's), each reservation's outcome in the metadata."""
    ids = reservation_ids(repo)
    if not ids:
        return CheckOutcome(
            True, "no reservation in the ledger: nothing to check", {"reservations": 0}
        )
    outcomes = {rid: CHECKS[which](repo, core, rid) for rid in ids}
    failed = [o for o in outcomes.values() if not o.passed]
    metadata: dict[str, Any] = {"reservations": len(ids), "failed": len(failed)}
    for rid, o in outcomes.items():
        metadata[rid] = {"passed": o.passed, "description": o.description, **o.metadata}
    if failed:
        return CheckOutcome(False, failed[0].description, metadata)
    text = "; ".join(f"{rid}: {o.description}" for rid, o in outcomes.items())[:900]
    return CheckOutcome(True, text, metadata)


@dataclass(frozen=True, slots=True)
class ReservationView:
    """One reservation as the UI shows it: its figures, its members, both verdicts."""

    reservation: Reservation
    members: list[dict[str, Any]]
    verdicts: dict[str, CheckOutcome]

    @property
    def digest(self) -> str:
        """Changes when a member or a verdict does."""
        verdicts = {k: (v.passed, v.description) for k, v in self.verdicts.items()}
        state = json.dumps([self.members, verdicts], sort_keys=True)
        return hashlib.sha1(state.encode()).hexdigest()


def reservation_view(repo: LedgerReader, core: Placement, reservation_id: str) -> ReservationView:
    """The reservation, each member with its state, ``memory_mib`` and witnessed UUIDs, and the
    two checks' verdicts, read from the ledger and the core now."""
    members: list[dict[str, Any]] = []
    for deploy in core.reservation_deploys(reservation_id):
        uuids = list(core.witness(deploy.id).uuids) if deploy.ready_replicas else []
        members.append(
            {
                "deploy_id": deploy.id,
                "state": deploy.state.value,
                "memory_mib": getattr(deploy.reservation, "memory_mib", None),
                "witnessed_uuids": ", ".join(uuids),
            }
        )
    members.sort(key=lambda m: str(m["deploy_id"]))
    verdicts = {name: check(repo, core, reservation_id) for name, check in CHECKS.items()}
    return ReservationView(repo.get(reservation_id), members, verdicts)
