"""What an operator reads of a deploy's status: its figures, and whether anything is wrong.

A status row becomes an asset event in the Dagster layer (a materialization and a ``phase``
check evaluation); which phases are wrong, how badly, and the words that say it are the
product's, decided here: a terminal phase (alias_blocked, quota_refused, capacity_unavailable,
readiness_timeout, …) is an error, ``drift_detected`` (a manual change, respected) a warning,
any other phase nothing wrong.
"""

# Decisions embodied here (docs/decisions.md):
# * “A deploy's status change is a runless materialization, not an observation”
# * “The Dagster layer translates; the engine decides what a tick launches and says”

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from gps_dagster.domain.phases import TERMINAL, Phase
from gps_dagster.store.records import TargetStatusRow

Level = Literal["warn", "error"]
_TERMINAL = frozenset(p.value for p in TERMINAL) - {Phase.DRIFT_DETECTED.value}


def level(phase: str) -> Level | None:
    """None = nothing wrong; ``error`` for a terminal phase; ``warn`` for drift."""
    if phase == Phase.DRIFT_DETECTED.value:
        return "warn"
    if phase in _TERMINAL or phase.split("{", 1)[0] in _TERMINAL:
        return "error"
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A deploy's phase check: passed or at ``level``, said in ``description``."""

    level: Level | None
    description: str
    metadata: dict[str, str]

    @property
    def passed(self) -> bool:
        return self.level is None


def verdict(row: TargetStatusRow) -> Verdict:
    """The phase check of a status row."""
    at = level(row.phase)
    if at is None:
        description = f"{row.phase}: nothing wrong"
    elif at == "warn":
        description = f"drift_detected: {row.reason or 'changed by hand'} — respected, not reverted"
    else:
        description = f"{row.phase} ({row.reason or '-'}): {row.fix or ''}"
    meta = {"phase": str(row.phase), "reason": row.reason or "", "fix": row.fix or ""}
    return Verdict(at, description[:900], meta)


def headline(row: TargetStatusRow) -> str:
    """The one line of a status change: its phase, and why."""
    why = f" ({row.reason})" if row.reason else ""
    return f"{row.phase}{why}"[:900]


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def intent_text(row: TargetStatusRow) -> str:
    """``running ×2 (source business_hours)``: the intent the target follows ("" when none)."""
    intent = row.intent or {}
    if not intent:
        return ""
    replicas = intent.get("replicas")
    text = str(intent.get("desired_state", ""))
    if replicas is not None:
        text += f" ×{replicas}"
    source = intent.get("source")
    return f"{text} (source {source})" if source else text


def status_metadata(row: TargetStatusRow) -> dict[str, Any]:
    """What an operator reads on the deploy's asset: phase, reason, fix, interval, intent."""
    return {
        "phase": str(row.phase),
        "reason": row.reason or "",
        "fix": row.fix or "",
        "interval": f"{_iso(row.interval_start)} → {_iso(row.interval_end)}",
        "intent": intent_text(row),
        "schedule": row.schedule,
        "deploy_id": row.deploy_id,
        "status_version": row.status_version,
    }
