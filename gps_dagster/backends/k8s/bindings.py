"""A workload's reservation binding (its ``names.RESERVATION`` annotation, R-GPS-1) read and
checked: the binding itself, its view on the port, whether it binds a reservation, and the scope
rule (a reservation lends its GPUs to one namespace and project, R-K8S-8). Pure reads of the
workload; ``backends/k8s/gps.py`` acts on them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.workloads import Workload
from gps_dagster.domain.gps.billing import reservation_project
from gps_dagster.domain.gps.bindings import ExclusiveBinding, TimeSlicedBinding
from gps_dagster.domain.gps.reservations import (
    Reservation,
)
from gps_dagster.domain.pool import DeployReservation, ExclusiveRef
from gps_dagster.ports import (
    AdmissionRefused,
    ReservationBinding,
)

Binding = ExclusiveBinding | TimeSlicedBinding

Member = tuple[Workload, Binding | None, int]
"""A labelled workload in scope, its reservation binding and its ready groups."""
Members = Callable[[], Sequence[Member]]
"""Every member, read when called: a scan of every labelled workload, so the rules that need it
for one reservation ask only when a reservation applies (a storm of unbound writes is then O(1)
each, not O(workloads))."""
_REF: TypeAdapter[Any] = TypeAdapter(DeployReservation)


def binding(w: Workload, gpus_per_replica: int) -> Binding | None:
    raw = w.annotations.get(names.RESERVATION)
    if not raw:
        return None
    try:
        ref = _REF.validate_python(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise AdmissionRefused(
            "binding_invalid",
            f"{w.ref}: annotation {names.RESERVATION} is not a binding ({exc}); fix it",
        ) from exc
    if isinstance(ref, ExclusiveRef):
        return ExclusiveBinding(gpus_per_replica=gpus_per_replica, reservations=ref.reservations)
    assert isinstance(ref, TimeSlicedBinding)
    return ref


def binding_view(b: Binding | None) -> ReservationBinding | None:
    if b is None:
        return None
    if isinstance(b, TimeSlicedBinding):
        return ReservationBinding((b.reservation,), "time_sliced", b.memory_mib)
    return ReservationBinding(tuple(b.reservations), "exclusive")


def bound_to(b: Binding | None, reservation_id: str) -> bool:
    if isinstance(b, TimeSlicedBinding):
        return b.reservation == reservation_id
    return isinstance(b, ExclusiveBinding) and reservation_id in b.reservations


def queue_project(rsv: Reservation) -> str:
    """The KAI queue's project of a reservation-bound render: the reservation's own (its
    namespace), never a label of the workload — a label is whatever its author wrote."""
    return reservation_project(rsv) or rsv.namespace


def check_scope(w: Workload, rsv: Reservation) -> None:
    """A reservation lends its GPUs to one namespace (and so one project), whatever the mode:
    a workload elsewhere that carries the binding annotation is refused, never rendered onto
    the reservation's node (R-K8S-8)."""
    if rsv.namespace != w.namespace:
        raise AdmissionRefused(
            "reservation_namespace_mismatch",
            f"{w.ref} is bound to {rsv.id}, whose pods run in namespace {rsv.namespace}; "
            f"deploy it in {rsv.namespace} or remove the {names.RESERVATION} annotation",
        )
    owner, claimed = reservation_project(rsv), w.labels.get(names.PROJECT)
    if owner is not None and claimed and claimed != owner:
        raise AdmissionRefused(
            "reservation_project_mismatch",
            f"{w.ref} is labelled {names.PROJECT}={claimed} but {rsv.id} belongs to project "
            f"{owner}; fix the label or bind a reservation of project {claimed}",
        )


def ready_groups(status: Mapping[str, Any]) -> int:
    try:
        return int(status.get("readyReplicas") or 0)
    except (TypeError, ValueError):
        return 0
