"""Deterministic identities: the same plan gets the same ids in every engine replica.

A transition is identified by (schedule, version, targets with their interval
starts and attempt numbers); a step's idempotency key by (schedule, target,
interval, step) as SPEC R-PASS-7 asks, plus the attempt. Two engines that open the same plan collide
on these keys instead of submitting twice.
"""

# Decisions embodied here (docs/decisions.md):
# * “Interval identity = (schedule, version, target, interval start) + the attempt”

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def transition_id(schedule: str, version: int, targets: Iterable[tuple[str, datetime, int]]) -> str:
    """``targets``: (deploy id, interval start, target generation) of every target in the plan."""
    parts = "|".join(f"{d}@{_stamp(s)}#g{g}" for d, s, g in sorted(targets))
    digest = hashlib.sha256(f"{schedule}|v{version}|{parts}".encode()).hexdigest()[:16]
    return f"tr-{digest}"


def idempotency_key(
    schedule: str,
    version: int,
    deploy_id: str,
    interval_start: datetime,
    step: str,
    generation: int,
) -> str:
    """(schedule, target, interval, step) — plus the attempt (target generation), so an
    apply-now after a terminal phase is a new, equally deterministic attempt."""
    return f"{schedule}/v{version}/{deploy_id}/{_stamp(interval_start)}/g{generation}/{step}"


def action_id(key: str) -> str:
    return "act-" + hashlib.sha256(key.encode()).hexdigest()[:20]
