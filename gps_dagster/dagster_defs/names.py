"""Names, tags and run keys of the Dagster surface, in one place.

Dagster accepts only ``[A-Za-z0-9_]`` in definition names and DynamicOut
mapping keys, while schedule names and deploy ids carry ``-`` and ``.``. Every
sanitised name gets a short hash of the original so that ``a-b`` and ``a_b``
never collide. Tags and run keys are the contract operators filter on in the
UI and through GraphQL (``runsOrError(filter: {tags: ...})``).
"""

from __future__ import annotations

import hashlib
import re

TRANSITION_JOB = "gps_transition"
TRANSITION_JOB_ACQUIRE_FIRST = "gps_transition_acquire_first"
RECONCILE_SENSOR = "gps_reconcile"
BOUNDARY_SENSOR = "gps_boundaries"
CAPACITY_WAIT_SENSOR = "gps_capacity_wait"
APPLY_NOW_SENSOR = "gps_apply_now"
RESERVATION_SENSOR = "gps_reservation_partitions"
RESERVATIONS_ASSET = "gpu_reservations"
RESERVATION_PARTITIONS = "gpu_reservations"
TARGET_STATUS_ASSET = "target_status"
TIMELINE_ASSET = "schedule_timeline"
TIMELINE_JOB = "gps_timeline_job"
TIMELINE_SCHEDULE = "gps_timeline_hourly"
CHECKS_JOB = "gps_reservation_checks"
CHECKS_SCHEDULE = "gps_reservation_checks_every_10m"
CHECK_PLACEMENT = "placement_mismatch"
CHECK_OVERCOMMIT = "reservation_overcommitted"

TAG_SCHEDULE = "gps/schedule"
TAG_TARGETS = "gps/targets"
TAG_INTERVAL = "gps/interval"
TAG_TRIGGER = "gps/trigger"
TAG_TRANSITION = "gps/transition"
TAG_PHASE = "gps/phase"
TAG_VERSION = "gps/schedule_version"

_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


def short_hash(text: str, size: int = 6) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:size]


def safe(text: str) -> str:
    """``text`` reduced to ``[A-Za-z0-9_]``, plus a hash suffix when anything changed."""
    cleaned = _UNSAFE.sub("_", text).strip("_") or "x"
    return cleaned if cleaned == text else f"{cleaned}_{short_hash(text)}"


def boundary_schedule_name(schedule: str, window: str, edge: str) -> str:
    """Dagster name of the boundary schedule firing at ``edge`` (start|end) of a window."""
    return f"gps_{safe(schedule)}__{safe(window)}__{edge}"


def plan_run_key(transition_id: str) -> str:
    """One run per transition plan: a repeated launch is deduplicated by the daemon."""
    return f"{transition_id}:plan"


def resume_run_key(transition_id: str, attempt: int) -> str:
    """A plan run launched again because its steps were left pending (gate was off)."""
    return f"{transition_id}:resume:{attempt}"


def acquire_run_key(transition_id: str, attempt: int) -> str:
    """The ``attempt``-th acquire-only run launched by the capacity-wait sensor."""
    return f"{transition_id}:acquire:{attempt}"


def step_mapping_key(step_id: str, deploy_id: str) -> str:
    """DynamicOut mapping key of one step: readable (deploy id) and unique (step id hash)."""
    return f"{_UNSAFE.sub('_', deploy_id).strip('_') or 'x'}_{short_hash(step_id, 8)}"
