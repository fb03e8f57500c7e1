"""Names, tags and run keys of the Dagster surface, in one place.

Dagster accepts only ``[A-Za-z0-9_]`` in definition names, asset key parts, group names and
mapping keys, while schedule names and deploy ids carry ``-`` and ``.``: names are made
readable (``demo-swap`` → ``demo_swap``), with a short hash only where two would collide. Tags
and run keys are the contract operators filter on in the UI and through GraphQL.
"""

# Decisions embodied here (docs/decisions.md):
# * “One asset per managed deploy, keyed `deploy/<deploy>`”
# * “Readable Dagster names”
# * “"Launched by" is Dagster's, and not rewritten”

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable

from gps_dagster.engine import gps_checks, sensor_health

TRANSITION_JOB = "gps_transition"
TRANSITION_JOB_ACQUIRE_FIRST = "gps_transition_acquire_first"
ACQUIRE_JOB = "gps_acquire"
PREARM_JOB = "gps_prearmed"
PREARM_SENSOR = sensor_health.PREARM
RECONCILE_SENSOR = sensor_health.RECONCILE
BOUNDARY_SENSOR = sensor_health.BOUNDARY
MINUTE_SCHEDULE = "gps_every_minute"
CAPACITY_WAIT_SENSOR = sensor_health.CAPACITY_WAIT
APPLY_NOW_SENSOR = sensor_health.APPLY_NOW
RESERVATION_SENSOR = "gps_reservation_partitions"
RESERVATIONS_ASSET = "gpu_reservations"
RESERVATION_PARTITIONS = "gpu_reservations"
TIMELINE_ASSET = "schedule_timeline"
TIMELINE_JOB = "gps_timeline_job"
TIMELINE_SCHEDULE = "gps_timeline_hourly"
CHECKS_JOB = "gps_reservation_checks"
CHECKS_SCHEDULE = "gps_reservation_checks_every_10m"
DEPLOY_CHECKS_JOB = "gps_deploy_checks"
CHECK_PLACEMENT = gps_checks.PLACEMENT  # "placement_mismatch"
CHECK_OVERCOMMIT = gps_checks.OVERCOMMIT  # "reservation_overcommitted"
CHECK_DEPLOY_PHASE = "phase"
CHECK_AUTOMATION = "automation"
"""A schedule asset's check: yellow while a sensor the product relies on is stopped."""
DEPLOY_KEY_PREFIX = "deploy"
SCHEDULE_KEY_PREFIX = "schedule"

TAG_SCHEDULE = "gps/schedule"
TAG_TARGETS = "gps/targets"
TAG_INTERVAL = "gps/interval"
TAG_TRIGGER = "gps/trigger"
TAG_TRANSITION = "gps/transition"
TAG_PHASE = "gps/phase"
TAG_VERSION = "gps/schedule_version"
TAG_APPLY_NOW = "gps/apply_now"
TAG_BATCH = "gps/batch"
TAG_PLANS = "gps/plans"
TAG_SWAP = "gps/swap"
"""A run's one-line summary in the Runs list: ``release md-qwen32b → acquire md-llama70b``."""
TAG_BOUNDARY = "gps/boundary"
"""The boundary a pre-armed run was launched ahead of (it opens its plan at that instant)."""
TAG_PREARM = "gps/prearm"
"""What a pre-armed run did at its boundary: ``serving <transition>``, or why it ended skipped."""
TAG_TICK = "gps/tick"
"""The instant of the boundary schedule's tick that launched the run."""
TAG_LATE_TICK = "gps/late_tick"
"""Set when a late tick serves another boundary than its own (the intent of now)."""
PARENT_RUN_TAG = "dagster/parent_run_id"
ROOT_RUN_TAG = "dagster/root_run_id"
"""Dagster's own run-group tags: a run carrying them is shown in its root run's group."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


def short_hash(text: str, size: int = 6) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:size]


def clean(text: str) -> str:
    """``text`` reduced to ``[A-Za-z0-9_]`` (readable, not necessarily unique)."""
    return _UNSAFE.sub("_", text).strip("_") or "x"


def readable(originals: Iterable[str]) -> dict[str, str]:
    """A Dagster-safe name per original: ``clean(original)``, with a hash suffix only for the
    originals whose clean names collide (``a-b`` and ``a_b`` → ``a_b_3f2a1c``, ``a_b_9e0d4b``)."""
    by_clean: dict[str, list[str]] = defaultdict(list)
    for original in dict.fromkeys(originals):
        by_clean[clean(original)].append(original)
    out: dict[str, str] = {}
    for cleaned, group in by_clean.items():
        for original in group:
            out[original] = cleaned if len(group) == 1 else f"{cleaned}_{short_hash(original)}"
    return out


def boundary_schedule_name(schedule: str, window: str, edge: str) -> str:
    """``demo_swap__business_hours__start`` (``boundary_schedule_names``: collision-safe)."""
    return f"{clean(schedule)}__{clean(window)}__{edge}"


def boundary_schedule_names(
    edges: Iterable[tuple[str, str, str]],
) -> dict[tuple[str, str, str], str]:
    """Collision-safe names of (schedule, window, edge) boundary schedules."""
    wanted = list(dict.fromkeys(edges))
    plain = {e: boundary_schedule_name(*e) for e in wanted}
    counts: dict[str, int] = defaultdict(int)
    for name in plain.values():
        counts[name] += 1
    return {
        e: name if counts[name] == 1 else f"{name}_{short_hash('/'.join(e))}"
        for e, name in plain.items()
    }


def group_name(schedule: str) -> str:
    """Asset group of a deploy schedule's targets (readable; the schedule is in the metadata)."""
    return clean(schedule)


def plan_run_key(transition_id: str) -> str:
    return f"{transition_id}:plan"


def resume_run_key(transition_id: str, attempt: int) -> str:
    """A plan run launched again because its steps were left pending (gate was off)."""
    return f"{transition_id}:resume:{attempt}"


def acquire_run_key(transition_id: str, attempt: int) -> str:
    return f"{transition_id}:acquire:{attempt}"


def batch_run_key(batch_id: str) -> str:
    return f"{batch_id}:batch"


def step_mapping_key(step_id: str, deploy_id: str) -> str:
    """DynamicOut mapping key of one step: readable (deploy id) and unique (step id hash)."""
    return f"{clean(deploy_id)}_{short_hash(step_id, 8)}"
