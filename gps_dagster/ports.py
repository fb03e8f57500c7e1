"""The narrow ports the engine depends on: the Core control plane and the Clock.

The engine never talks to a cluster: it talks to ``Core`` (R-PASS, R-SCALE, R-GPS).
The embedded simulated pool (``gps_dagster.backends.sim``) implements it today;
a Kubernetes adapter will implement the same Protocol later, so nothing here
names a simulator detail, a table or a Kubernetes object. Values are frozen,
errors are typed and split by whether retrying helps (``domain.errors``), and
every mutation carries an ETag and an idempotency key: a repeated key returns
the earlier ``Operation`` and never mutates twice.

This module imports neither SQLAlchemy nor Dagster.
"""

# Decisions embodied here (docs/decisions.md):
# * “A batched read on the Core port”
# * “`BatchingCore` is optional”
# * “Acquires previewed together only where previews count each other”
# * “The batch lane submits with one `Core.submit_many` call”
# * “The Core port is split by role”
# * “The reservation ledger lock is taken where the guarded write is, through the ledger port”

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gps_dagster.domain.errors import GpsError, PermanentError, TemporaryError
from gps_dagster.domain.gps.reservations import Reservation, ReservationSpec
from gps_dagster.domain.kinds import DeployKind

__all__ = [
    "AdmissionPreview",
    "AdmissionRefused",
    "AliasGuardUnavailable",
    "AliasInfo",
    "BatchingCore",
    "BillingRefused",
    "CapacityPreview",
    "Clock",
    "Core",
    "CoreError",
    "DeployControl",
    "DeployReads",
    "DeployState",
    "DeployView",
    "DeployWrites",
    "EtagMismatch",
    "Fits",
    "HolderRelease",
    "Insufficient",
    "NotFound",
    "Operation",
    "OperationKind",
    "OperationState",
    "Permanent",
    "Placement",
    "Preflight",
    "PreviewingReads",
    "QuotaRefused",
    "QuotaStatus",
    "ReservationBinding",
    "ReservationBook",
    "ReservationLedger",
    "StepCore",
    "Submission",
    "Transient",
    "Unsupported",
    "WitnessResult",
    "submit_each",
    "submit_one",
]


@runtime_checkable
class Clock(Protocol):
    """Where "now" comes from; injected everywhere below the edges."""

    def now(self) -> datetime:
        """The current instant, timezone-aware."""
        ...


class DeployState(StrEnum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    UPDATING = "UPDATING"
    READY = "READY"
    STOPPING = "STOPPING"
    DELETING = "DELETING"
    FAILED = "FAILED"


class OperationKind(StrEnum):
    STOP = "stop"
    START = "start"
    SET_REPLICA_INTENT = "set_replica_intent"


class OperationState(StrEnum):
    ACCEPTED = "accepted"
    """Submitted; the deploy has not converged to it yet."""
    DONE = "done"
    """The deploy reached what the operation asked for."""
    FAILED = "failed"
    SUPERSEDED = "superseded"
    """A later operation on the same deploy replaced it before it converged."""


@dataclass(frozen=True, slots=True)
class ReservationBinding:
    """The GPU reservations a deploy is bound to (SPEC R-GPS-2); filled by the GPS work."""

    reservation_ids: tuple[str, ...]
    mode: str
    """``exclusive`` or ``time_sliced``."""
    memory_mib: int | None = None
    """VRAM budget of a time-sliced member."""


@dataclass(frozen=True, slots=True)
class AdmissionPreview:
    """What the core's reservation admission would decide now (R-GPS-3), read-only.

    ``admitted`` is True for deploys no VRAM budget applies to (unbound, or
    exclusive: whole GPUs are placement, not admission). The MiB figures are
    those of the time-sliced reservation the deploy is a member of.
    """

    deploy_id: str
    admitted: bool
    reservation_id: str | None = None
    reason: str | None = None
    """``reservation_overcommitted``, ``reservation_not_active``, ... when refused."""
    message: str = ""
    budget_mib: int = 0
    running_mib: int = 0
    in_flight_mib: int = 0
    proposed_mib: int = 0


@dataclass(frozen=True, slots=True)
class WitnessResult:
    """The GPU UUIDs each *ready* replica group of a deploy received (R-GPS-7).

    The core reports what placement gave the pods (on Kubernetes: the binder
    annotation, else DCGM; in the simulator: its placement); judging them
    against the reservation ledger is the product's job (``gps.witness``).
    """

    deploy_id: str
    replicas: tuple[tuple[str, ...], ...]
    """One tuple of UUIDs per ready replica group, in group order; empty = no evidence yet."""
    source: str

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u for group in self.replicas for u in group))


@dataclass(frozen=True, slots=True)
class DeployView:
    """What the control plane reports about one deploy, read in one consistent snapshot."""

    id: str
    kind: DeployKind
    state: DeployState
    etag: str
    """Opaque; pass it back unchanged to the next mutation."""
    aliases: tuple[str, ...]
    project: str | None
    """CMP project, or ``None`` for an admin (not CMP-managed) deploy."""
    cmp_managed: bool
    endpoint: str | None
    """CMP endpoint this deploy is a member of, if any."""
    gpus_per_replica: int
    nodes_per_replica: int
    desired_replicas: int
    ready_replicas: int
    """Ready replica *groups* (a multi-node group counts once)."""
    generation: int
    applied_generation: int
    terminating_pods: int
    unschedulable: bool
    """Some pods of the deploy are pending and cannot be placed."""
    hpa: bool = False
    role_min: int | None = None
    """Resource role replicas ``{desired,min,max}`` (R-SCALE-3); desired = ``desired_replicas``."""
    role_max: int | None = None
    reservation: ReservationBinding | None = None
    refused: str | None = None
    scale_up: str | None = None
    """Cluster-autoscaler's word on the pending pods: ``triggered`` (a node is coming: wait to the
    readiness deadline, not the unschedulable grace), ``not_triggered`` (no node group can fit
    them: unschedulable at once); None when no autoscaler spoke."""
    """The API server's refusal to create the deploy's pods, in its words (a ReplicaSet's
    ``ReplicaFailure/FailedCreate``: quota, LimitRange, Pod Security, a webhook); None if none."""
    crash_loop: str | None = None
    """A container of the deploy's live pods waiting in ``CrashLoopBackOff`` (the kubelet
    restarts it after a back-off), in the runtime's words: pod, container, restarts, last exit
    code; None when none is. The simulated pool has no containers: always None."""
    restarts: int = 0
    """The most restarts of a container waiting in ``CrashLoopBackOff`` (0 when none)."""
    instance: str | None = None
    """The control plane's identity of the object behind the id (Kubernetes: kind,
    namespace/name and ``metadata.uid``): equal between two reads iff they read the same object.
    A claim is pinned to it at first sight; another value is ``deploy_replaced`` (R-K8S-8).
    None when the backend has no such identity (the simulated pool: an id is its own row)."""

    @property
    def converged_stopped(self) -> bool:
        """STOPPED and no pod terminating: the evidence that its GPUs are released."""
        return self.state is DeployState.STOPPED and self.terminating_pods == 0

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.desired_replicas


@dataclass(frozen=True, slots=True)
class Operation:
    """An accepted mutation. Replaying its idempotency key returns this same value."""

    id: str
    deploy_id: str
    kind: OperationKind
    idempotency_key: str
    state: OperationState
    etag_after: str
    """The deploy's ETag right after the mutation (use it for the next one)."""
    created_at: datetime
    replicas: int | None = None
    """``set_replica_intent`` only: the replicas asked for."""
    persist_only: bool = False
    """The deploy was STOPPED: the intent was stored, nothing was scheduled (R-SCALE-5)."""


@dataclass(frozen=True, slots=True)
class Fits:
    """The requested replica groups fit whole on currently published free GPUs."""

    groups: int


@dataclass(frozen=True, slots=True)
class Insufficient:
    """Not enough published free capacity for whole replica groups."""

    reason: str
    """``insufficient_capacity`` or ``no_matching_flavor``."""
    free_by_node: Mapping[str, int] = field(default_factory=dict)
    """Published free GPUs per node of a matching flavor (nodes with none omitted)."""
    groups_needed: int = 0
    groups_fitting: int = 0


CapacityPreview = Fits | Insufficient


@dataclass(frozen=True, slots=True)
class AliasInfo:
    deploy_id: str
    aliases: tuple[str, ...]

    @property
    def has_alias(self) -> bool:
        return bool(self.aliases)


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """Result of a passed quota preflight (what was counted)."""

    project: str | None
    quota: int | None
    used: int
    requested: int
    scope: str | None = None
    """Which quota counted (Kubernetes: ``<namespace>/<ResourceQuota>`` plus its scopes): a
    release frees room only for acquires under the same one. None: the project's (simulator)."""


@dataclass(frozen=True, slots=True)
class Submission:
    """One mutation of ``Core.submit_many``: the arguments its single call would take."""

    kind: OperationKind
    deploy_id: str
    etag: str
    idempotency_key: str
    replicas: int | None = None
    """``set_replica_intent`` only."""
    allow_aliased_downtime: bool = False
    """``stop`` only."""


class CoreError(GpsError):
    """Root of every error a Core adapter raises on purpose."""

    http_status: int = 500

    def __init__(self, message: str = "", *, reason: str | None = None) -> None:
        self.reason = reason or type(self).__name__
        super().__init__(message or self.reason)


class Permanent(CoreError, PermanentError):
    """The call cannot succeed as is."""

    http_status = 400


class Transient(CoreError, TemporaryError):
    """Retry later (same idempotency key); the mutation may or may not have been applied."""

    http_status = 503


class EtagMismatch(Permanent):
    """The ETag passed is not the deploy's current one: re-read, then decide again."""

    http_status = 412


class NotFound(Permanent):
    http_status = 404


class QuotaRefused(Permanent):
    http_status = 403

    def __init__(
        self,
        message: str = "",
        *,
        project: str | None = None,
        quota: int | None = None,
        used: int = 0,
        requested: int = 0,
        scope: str | None = None,
    ) -> None:
        self.project, self.quota, self.used, self.requested = project, quota, used, requested
        self.scope = scope
        super().__init__(message, reason="quota_refused")


class BillingRefused(Permanent):
    http_status = 402

    def __init__(self, message: str = "", *, project: str | None = None) -> None:
        self.project = project
        super().__init__(message, reason="billing_refused")


class AdmissionRefused(Permanent):
    """The core's own admission refused the mutation; ``reason`` says why."""

    http_status = 422

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason, reason=reason)


class Unsupported(Permanent):
    """The deploy kind does not support the operation (``reason``: a kinds.py code)."""

    http_status = 422

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason, reason=reason)


class AliasGuardUnavailable(Permanent):
    """The alias guard is not wired (``unwired``) or cannot be read (``read_error``).

    Never means "no alias": the engine fails closed (``alias_blocked``).
    """

    http_status = 503

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason, reason=reason)


class DeployReads(Protocol):
    """Core role: what the control plane reports about deploys and operations (read-only)."""

    def get_deploy(self, deploy_id: str) -> DeployView:
        """Raises ``NotFound``."""
        ...

    def get_deploys(self, deploy_ids: Sequence[str]) -> Mapping[str, DeployView]:
        """Many deploys in one read (the engine's per-pass eligibility sweep); unknown ids
        omitted."""
        ...

    def get_operation(self, op_id: str) -> Operation:
        """Raises ``NotFound``."""
        ...

    def list_members(self, endpoint_id: str) -> tuple[DeployView, ...]:
        """Member deploys of a CMP endpoint; raises ``NotFound``."""
        ...


class DeployWrites(Protocol):
    """Core role: the mutations. Each carries an ETag and an idempotency key (a replayed key
    returns the earlier ``Operation`` and mutates nothing)."""

    def stop(
        self, deploy_id: str, *, etag: str, allow_aliased_downtime: bool, idempotency_key: str
    ) -> Operation:
        """Stop; an aliased deploy needs ``allow_aliased_downtime=True`` (else
        ``AdmissionRefused``)."""
        ...

    def start(self, deploy_id: str, *, etag: str, idempotency_key: str) -> Operation:
        """Start with the stored replicas; admission checks quota and billing."""
        ...

    def set_replica_intent(
        self, deploy_id: str, replicas: int, *, etag: str, idempotency_key: str
    ) -> Operation:
        """Set workload replicas and roles ``{desired,min,max}`` together (R-SCALE-3).

        On a STOPPED deploy it only persists the intent and returns the new ETag (R-SCALE-5).
        """
        ...

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        """Many mutations in one call (the engine's batch lane): one result per submission, in
        order — the ``Operation``, or the error its single call would have raised.

        Each submission behaves exactly as its own ``stop`` / ``start`` /
        ``set_replica_intent``: the same ETag precondition, the same idempotency (a replayed key
        returns the earlier operation), the same admission; one refused changes nothing of the
        others. An ``Operation`` returned is durable. The adapter chooses how to share the work
        (one transaction, bounded concurrency); ``submit_each`` is the one-at-a-time form.
        """
        ...


class Preflight(Protocol):
    """Core role: read-only previews of what a mutation would meet — capacity, the alias guard,
    quota, billing and reservation admission. None of them mutates."""

    def preview_capacity(self, deploy_id: str, *, delta_replicas: int) -> CapacityPreview:
        """Read-only: do ``delta_replicas`` more whole replica groups fit per node now?"""
        ...

    def alias_guard(self, deploy_id: str) -> AliasInfo:
        """The deploy's aliases; raises ``AliasGuardUnavailable`` when not wired or unreadable."""
        ...

    def check_quota(self, deploy_id: str, *, delta_replicas: int) -> QuotaStatus:
        """Read-only preflight; raises ``QuotaRefused``."""
        ...

    def check_billing(self, deploy_id: str) -> None:
        """Read-only preflight; raises ``BillingRefused``."""
        ...

    def admission_preview(
        self, deploy_id: str, *, delta_replicas: int, releasing: Sequence[str] = ()
    ) -> AdmissionPreview:
        """Read-only: would starting / scaling up ``deploy_id`` pass reservation admission now?

        ``releasing`` names deploys the caller's plan stops first (release-first):
        their VRAM shares are not counted. Raises ``NotFound``.
        """
        ...


class Placement(Protocol):
    """Core role: where deploys landed on GPU reservations (R-GPS-7) and what is bound to one."""

    def witness(self, deploy_id: str) -> WitnessResult:
        """The GPU UUIDs each ready replica group of the deploy got; raises ``NotFound``."""
        ...

    def reservation_deploys(self, reservation_id: str) -> tuple[DeployView, ...]:
        """Deploys bound to the reservation (exclusive or time-sliced), in a stable order."""
        ...


class PreviewingReads(DeployReads, Preflight, Protocol):
    """Reads and previews, no mutation: planning, the dry run, the preflight checks."""


class DeployControl(DeployReads, DeployWrites, Protocol):
    """Reads and mutations: a CMP endpoint's member-by-member start / stop."""


class StepCore(DeployReads, DeployWrites, Preflight, Protocol):
    """What executing a step uses: read, re-check (capacity, alias guard), mutate."""


class Core(DeployReads, DeployWrites, Preflight, Placement, Protocol):
    """The deployment control plane (R-PASS, R-SCALE, R-GPS): the union of its roles.

    Adapters implement it whole; each engine module is typed by the narrowest role it uses
    (decision "The Core port is split by role")."""


@runtime_checkable
class BatchingCore(Protocol):
    """Optional: a core that serves many calls from one session (decision "`BatchingCore` is
    optional.").

    Inside ``with core.batch():`` every call behaves as on its own — same
    results, same errors, a failed mutation changes nothing — but may share one
    transaction or connection, and mutations are durable only when the block
    exits without raising. ``preview_capacity`` inside a block counts the
    groups earlier previews of the same block found fitting as taken (the
    caller is about to start them), so a batch never plans two starts on one
    free GPU — when ``previews_count_fits()`` says so: a core whose block may
    be a no-op (the simulator on SQLite or with faults declared) answers False,
    and the engine then submits each fit before the next preview. A core
    without it is called one call at a time.
    """

    def batch(self) -> AbstractContextManager[None]: ...

    def previews_count_fits(self) -> bool: ...


@runtime_checkable
class HolderRelease(Protocol):
    """Optional: a core whose GPS holder pods outlive the stop of the last member (Kubernetes).

    The holder goes once a member is ready again — as a write of the fenced, gated converge of
    the start that readied it (``engine.gps_hooks.holder_release``), never as a side effect of
    a read (SPEC R-K8S-7). Already gone is success.
    """

    def release_holder(self, deploy_id: str) -> None: ...


def submit_one(core: DeployWrites, s: Submission) -> Operation:
    """The single port call ``s`` stands for (raises what that call raises)."""
    if s.kind is OperationKind.STOP:
        return core.stop(
            s.deploy_id,
            etag=s.etag,
            allow_aliased_downtime=s.allow_aliased_downtime,
            idempotency_key=s.idempotency_key,
        )
    if s.kind is OperationKind.START:
        return core.start(s.deploy_id, etag=s.etag, idempotency_key=s.idempotency_key)
    if s.replicas is None:
        raise Permanent(f"set_replica_intent of {s.deploy_id} without replicas", reason="invalid")
    return core.set_replica_intent(
        s.deploy_id, s.replicas, etag=s.etag, idempotency_key=s.idempotency_key
    )


def submit_each(
    core: DeployWrites, submissions: Sequence[Submission]
) -> list[Operation | Exception]:
    """``submit_many`` one call at a time, through ``core``'s own single calls (a core with no
    shared form, or a wrapper that must see every call). ``BaseException`` (a crash) propagates."""
    out: list[Operation | Exception] = []
    for s in submissions:
        try:
            out.append(submit_one(core, s))
        except Exception as exc:  # the caller judges each result
            out.append(exc)
    return out


class ReservationLedger(Protocol):
    """The GPS reservation ledger as an adapter reads it (the store's ``ReservationRepository``
    implements it structurally; the composition root hands it over, so no adapter imports the
    store). ``get`` raises ``ReservationNotFound`` for an unknown id."""

    def get(self, reservation_id: str) -> Reservation: ...

    def list(self, *, include_released: bool = True) -> list[Reservation]: ...

    def locked(self, reservation_id: str) -> AbstractContextManager[Reservation]:
        """One transaction holding the reservation's row lock, its row read under it: the
        starts admitted against it serialise on it while the block runs."""
        ...


class ReservationBook(ReservationLedger, Protocol):
    """The ledger plus recording a reservation (a pool file's declared reservations)."""

    def create(self, spec: ReservationSpec, *, at: datetime, actor: str) -> Reservation: ...
