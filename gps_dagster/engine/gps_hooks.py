"""The engine's two GPS hooks, built from a core and the reservation ledger (R-GPS).

* ``reservation_check`` (preflight, R-PASS-6 / R-GPS-3): asks the core's
  read-only ``admission_preview`` whether each acquiring step would pass the
  VRAM budget once the plan's releasing steps have run, so that A is not
  stopped when B could not be admitted anyway.
* ``witness`` (convergence, R-GPS-7): reads the UUIDs the core reports for
  each ready replica group and judges them with ``gps.witness.judge`` against
  the ledger's UUIDs of the deploy's reservations — the ledger, not the core,
  says which GPUs are reserved. A mismatch is terminal ``placement_mismatch``
  with a fix text; nothing is stopped or restarted (no automatic repair).

* ``holder_release`` (after a converge, R-GPS-6 / R-K8S-7): once the start of a time-sliced
  member converged — in the pass whose store write won the fence, with the gate enforcing —
  the core's holder pod of that reservation goes. Never on a read, never in observe or off.

``hooks(store, core)`` returns all three, ready for ``Engine(..., **hooks(...))``.
"""

# Decisions embodied here (docs/decisions.md):
# * “The holder goes in the converge, not in a read”
# * “The node agent's heartbeat is a stamp on the pods it publishes”
# * “The Core port is split by role”

from __future__ import annotations

import logging
from typing import Protocol, TypedDict

from gps_dagster.domain.gps.errors import ReservationNotFound
from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.gps.witness import WITNESS_UNAVAILABLE, Confirmed, Mismatch, judge
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, PlannedStep
from gps_dagster.domain.step_state import Gate
from gps_dagster.engine.convergence import AfterConverged, Witness
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.engine.preflight import ReservationCheck
from gps_dagster.engine.store_ports import EngineStore
from gps_dagster.ports import CoreError, DeployView, HolderRelease, Placement, Preflight
from gps_dagster.store.records import ActionRow

log = logging.getLogger(__name__)


class Ledger(Protocol):
    def get(self, reservation_id: str) -> Reservation: ...


class Hooks(TypedDict):
    reservation_check: ReservationCheck
    witness: Witness
    after_converged: AfterConverged


class ReservationRoles(Preflight, Placement, Protocol):
    """The Core roles the reservation hooks use: admission previews and placement reads."""


def reservation_check(core: Preflight) -> ReservationCheck:
    """Preflight refusal when the core's admission would refuse the acquiring step."""

    def check(
        deploy: DeployView, step: PlannedStep, *, releasing: frozenset[str] = frozenset()
    ) -> Verdict | None:
        if deploy.reservation is None or step.delta_replicas <= 0:
            return None
        seen = core.admission_preview(
            deploy.id, delta_replicas=step.delta_replicas, releasing=sorted(releasing)
        )
        if seen.admitted:
            return None
        phase = (
            Phase.RESERVATION_OVERCOMMITTED
            if seen.reason == "reservation_overcommitted"
            else Phase.INELIGIBLE
        )
        return verdict(
            phase,
            seen.reason if phase is Phase.INELIGIBLE else None,
            extra=seen.message,
            detail={
                "reservation": seen.reservation_id,
                "budget_mib": seen.budget_mib,
                "running_mib": seen.running_mib,
                "in_flight_mib": seen.in_flight_mib,
                "proposed_mib": seen.proposed_mib,
            },
        )

    return check


def witness(core: Placement, ledger: Ledger) -> Witness:
    """True when every ready replica's UUIDs lie in the deploy's reservations; a Verdict on
    mismatch."""

    def seen(deploy: DeployView) -> Verdict | bool | None:
        binding = deploy.reservation
        if binding is None:
            return True
        try:
            got = core.witness(deploy.id)
            reserved = _reserved_uuids(ledger, binding.reservation_ids)
        except CoreError as exc:
            if exc.reason == WITNESS_UNAVAILABLE:
                raise  # the step's owner keeps the readiness clock and names the cause (failures)
            return None  # no evidence this pass; the readiness clock still runs
        except ReservationNotFound:
            return None
        if len(got.replicas) < deploy.ready_replicas:
            return None
        name = "+".join(binding.reservation_ids)
        result = judge(got.uuids, name, reserved, source=got.source)
        if isinstance(result, Confirmed):
            return True
        if isinstance(result, Mismatch):
            return verdict(
                Phase.PLACEMENT_MISMATCH,
                extra=result.fix,
                detail={
                    "uuids": list(result.uuids),
                    "outside": list(result.outside),
                    "reservation": name,
                    "source": result.source,
                },
            )
        return None

    return seen


def _reserved_uuids(ledger: Ledger, ids: tuple[str, ...]) -> set[str]:
    return {u for rid in ids for u in ledger.get(rid).gpu_uuids}


def holder_release(store: EngineStore, core: object) -> AfterConverged:
    """After the converge of a time-sliced member's start: its reservation's holder goes."""

    def after(a: ActionRow, deploy: DeployView) -> None:
        binding = deploy.reservation
        if not isinstance(core, HolderRelease) or a.order != Order.ACQUIRE:
            return
        if binding is None or binding.mode != "time_sliced" or store.get_gate() != Gate.ENFORCE:
            return
        try:
            core.release_holder(deploy.id)
        except CoreError as exc:  # owned here: the member is converged, a holder left over
            # keeps only its reservation's share; the next converged start deletes it again
            log.warning("holder of %s not released: %s", "+".join(binding.reservation_ids), exc)

    return after


def hooks(store: EngineStore, core: ReservationRoles) -> Hooks:
    """The three hooks over the store's reservation ledger."""
    return {
        "reservation_check": reservation_check(core),
        "witness": witness(core, store.ledger()),
        "after_converged": holder_release(store, core),
    }
