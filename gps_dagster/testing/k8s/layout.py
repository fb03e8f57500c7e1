"""Where a pool file's objects live on a shared cluster: prefixed namespaces per project and
reservation, so many pools (tests running side by side, the demo) never see each other's."""

# Decisions embodied here (docs/decisions.md):
# * “A reservation's scope is its namespace, for every mode; the queue is the reservation's”

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.pool import DeploySpec, PoolSpec


def k8s_name(value: str) -> str:
    """A DNS-1123 name for an id (lowercase, ``-`` for anything else, at most 63)."""
    name = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")
    return (name or "x")[:63].rstrip("-")


@dataclass
class Layout:
    """Where a pool's objects live on the cluster."""

    prefix: str
    projects: dict[str, str] = field(default_factory=dict)
    reservation_namespaces: dict[str, str] = field(default_factory=dict)

    @property
    def admin(self) -> str:
        return self.prefix

    @property
    def system(self) -> str:
        return f"{self.prefix}-system"

    def namespaces(self) -> tuple[str, ...]:
        """Namespaces deploys live in (the adapter's scope)."""
        return tuple(
            dict.fromkeys(
                [self.admin, *self.projects.values(), *self.reservation_namespaces.values()]
            )
        )

    def namespace_of(self, d: DeploySpec, reservations: dict[str, Reservation]) -> str:
        ref = d.reservation
        if ref is not None and ref.mode == "time_sliced" and ref.reservation in reservations:
            return reservations[ref.reservation].namespace
        if ref is not None and ref.mode == "exclusive" and ref.reservations[0] in reservations:
            return reservations[ref.reservations[0]].namespace  # a reservation lends to one ns
        return self.projects[d.project] if d.project else self.admin


def layout(spec: PoolSpec, prefix: str) -> Layout:
    out = Layout(prefix)
    out.projects = {p: k8s_name(f"{prefix}-{p}") for p in spec.projects}
    out.reservation_namespaces = {
        r.namespace: k8s_name(f"{prefix}-{r.namespace}") for r in spec.reservations
    }
    return out


def remap(spec: PoolSpec, lay: Layout, at: datetime) -> list[Reservation]:
    """The pool's reservations with their namespaces moved into the layout."""
    out = []
    for r in spec.reservations:
        moved = r.model_copy(update={"namespace": lay.reservation_namespaces[r.namespace]})
        out.append(Reservation.from_spec(moved, at=at))
    return out
