"""The idempotency ledger kept on the workload, and the ETag derived from it.

Each mutation writes, in the same merge patch as its change (one atomic write, preconditioned on
the resourceVersion just read), an entry ``{key, seq, kind, ...}`` into the annotation
``gps.dagster.io/operations``. A resubmit with the same key finds its entry and returns the
earlier ``Operation`` without writing again (SPEC R-K8S-2, R-PASS-10). The ledger keeps the last
``KEEP`` entries: the engine only ever resubmits an action still in flight, minutes old.

A call that changes nothing (start of a running deploy, stop of a stopped one) writes nothing —
not even its key, because any annotation write bumps a Deployment's generation. Its operation id
carries the key (``…/noop:<kind>:<key>``); a resubmit decides again, so it still mutates at most
once.

**ETag.** The port's ETag is ``<uid>.<spec digest>.<seq>``: the object's identity, a digest of
its ``spec`` and the count of product mutations (a persist-only write changes no spec). A raw
resourceVersion would go stale every time a controller writes the status (a pod became ready),
and ``metadata.generation`` moves on a Deployment with **any annotation change** (the registry
bumps it because annotations are copied onto ReplicaSets: ``pkg/registry/apps/deployment/
strategy.go`` ``PrepareForUpdate``) — Argo CD's tracking annotation, Reloader, a ``kubectl
annotate`` would each turn the engine's next write into a spurious conflict. The spec digest moves
exactly when someone changes what the deploy runs (replicas, template, strategy …). The
resourceVersion is still the precondition of every write: each mutation re-reads the object,
compares this ETag, and patches with that read's resourceVersion — the change and the ledger in
one preconditioned merge patch, so a write that lands in between is a 409, never a lost update,
and a lost answer is replayed from the ledger.
"""

# Decisions embodied here (docs/decisions.md):
# * “The idempotency ledger lives on the workload”
# * “The ETag is `<uid>.<spec digest>.<ledger seq>`, not the generation”

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.workloads import Workload
from gps_dagster.ports import NotFound, Operation, OperationKind, OperationState

KEEP = 32
"""Entries kept per workload (oldest dropped first)."""
NOOP = "noop:"


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    seq: int
    kind: str
    state: str
    """``accepted`` or ``done`` (persist-only) as recorded; the live state is derived."""
    etag_after: str
    at: str
    replicas: int | None = None
    persist_only: bool = False


@dataclass(frozen=True, slots=True)
class Ledger:
    seq: int = 0
    entries: tuple[Entry, ...] = ()

    def by_key(self, key: str) -> Entry | None:
        return next((e for e in self.entries if e.key == key), None)


def read(w: Workload) -> Ledger:
    raw = w.annotations.get(names.OPERATIONS)
    if not raw:
        return Ledger()
    try:
        data = json.loads(raw)
        entries = tuple(Entry(**e) for e in data.get("ops", []))
        return Ledger(int(data.get("seq", 0)), entries)
    except (TypeError, ValueError, KeyError):
        return Ledger()  # a hand-edited ledger is not trusted: keys are checked again from scratch


def dump(ledger: Ledger) -> str:
    ops = [{k: v for k, v in asdict(e).items() if v is not None} for e in ledger.entries]
    return json.dumps({"seq": ledger.seq, "ops": ops}, separators=(",", ":"))


def etag(w: Workload, ledger: Ledger | None = None) -> str:
    ledger = ledger if ledger is not None else read(w)
    return etag_of(w.uid, spec_digest(w.raw.get("spec") or {}), ledger.seq)


def etag_of(uid: str, digest: str, seq: int) -> str:
    return f"{uid[:13]}.{digest}.{seq}"


def spec_digest(spec: Mapping[str, Any]) -> str:
    """A digest of a workload's ``spec`` (canonical JSON): blind to metadata and status."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def merge_apply(target: Any, patch: Any) -> Any:
    """``target`` with the JSON merge patch ``patch`` applied (RFC 7386), as the API server does."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_apply(out.get(key), value)
    return out


def append(
    w: Workload,
    ledger: Ledger,
    *,
    key: str,
    kind: OperationKind,
    at: datetime,
    spec_changes: bool,
    replicas: int | None = None,
    persist_only: bool = False,
    spec_patch: Mapping[str, Any] | None = None,
) -> tuple[Ledger, Entry]:
    """The ledger with the new entry; its ``etag_after`` predicts the object after the patch
    (``spec_patch``: the merge patch the same write applies to the spec)."""
    seq = ledger.seq + 1
    spec = w.raw.get("spec") or {}
    after = merge_apply(spec, spec_patch) if spec_changes and spec_patch else spec
    entry = Entry(
        key=key,
        seq=seq,
        kind=kind.value,
        state=OperationState.DONE.value if persist_only else OperationState.ACCEPTED.value,
        etag_after=etag_of(w.uid, spec_digest(after), seq),
        at=at.isoformat(),
        replicas=replicas,
        persist_only=persist_only,
    )
    return replace(ledger, seq=seq, entries=(*ledger.entries, entry)[-KEEP:]), entry


def operation_id(w: Workload, seq: int) -> str:
    return f"{w.kind}/{w.namespace}/{w.name}/{seq}"


def noop_id(w: Workload, kind: OperationKind, key: str) -> str:
    token = base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")
    return f"{w.kind}/{w.namespace}/{w.name}/{NOOP}{kind.value}:{token}"


@dataclass(frozen=True, slots=True)
class OperationRef:
    kind: str
    namespace: str
    name: str
    seq: int | None = None
    noop: tuple[OperationKind, str] | None = None
    """(kind, key) of an operation that changed nothing."""


def parse_operation_id(op_id: str) -> OperationRef:
    parts = op_id.split("/")
    hint = "ids look like Deployment/<namespace>/<name>/<seq>"
    if len(parts) != 4:
        raise NotFound(f"no operation {op_id!r} ({hint})")
    kind, ns, name, tail = parts
    if tail.isdigit():
        return OperationRef(kind, ns, name, seq=int(tail))
    if tail.startswith(NOOP) and tail.count(":") == 2:
        _, op_kind, token = tail.split(":")
        try:
            key = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
            return OperationRef(kind, ns, name, noop=(OperationKind(op_kind), key))
        except ValueError:
            pass
    raise NotFound(f"no operation {op_id!r} ({hint})")


def to_operation(w: Workload, e: Entry, state: OperationState) -> Operation:
    return Operation(
        id=operation_id(w, e.seq),
        deploy_id=w.deploy_id,
        kind=OperationKind(e.kind),
        idempotency_key=e.key,
        state=state,
        etag_after=e.etag_after,
        created_at=datetime.fromisoformat(e.at),
        replicas=e.replicas,
        persist_only=e.persist_only,
    )


def noop_operation(
    w: Workload,
    kind: OperationKind,
    key: str,
    *,
    at: datetime,
    state: OperationState,
) -> Operation:
    return Operation(
        id=noop_id(w, kind, key),
        deploy_id=w.deploy_id,
        kind=kind,
        idempotency_key=key,
        state=state,
        etag_after=etag(w),
        created_at=at,
    )
