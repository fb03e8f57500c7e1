"""What the planner records on a step for the lanes that execute and observe it.

A step row's ``detail`` is JSON: the planner writes six keys into it when the plan opens (how to
submit the step, how long its clocks run, which object it was planned on), and the lanes add
their bookkeeping beside them (when a retry's clock started, since when the pods are
unschedulable, the terminal phase, free capacity). ``StepPlan`` is the planner's part as a typed
value, parsed in one place: every lane reads ``StepPlan.of(detail).endpoint`` instead of
``(detail or {}).get("endpoint")``, so a key is spelled once, here. Parsing never raises: a row
written before a key existed, or holding a value of the wrong type, reads as the default (what
the lanes assumed of an absent key before). ``as_detail`` gives the dict the planner has always
written, key for key and in the same order, so rows already stored read the same.
"""

# Decisions embodied here (docs/decisions.md):
# * “A step's plan is a typed record; its detail keys are spelled once”

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

RETRY_SINCE = "retry_since"
"""``detail`` key: when a release not yet submitted first failed (its clock starts there)."""
UNSCHEDULABLE_SINCE = "unschedulable_since"
"""``detail`` key: when an accepted acquire's pods were first seen unschedulable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPlan:
    """The planner's keys of a step's ``detail``, typed."""

    persist_replicas: bool = False
    """A start that first persists its replicas (R-SCALE-5): set the intent, then start."""
    allow_downtime: bool = False
    """The window allows a stop while the deploy is aliased (R-PASS-8)."""
    interval_end: datetime | None = None
    """The end of the step's interval (caps an acquire's capacity wait); None: open-ended."""
    endpoint: bool = False
    """The target is an endpoint: the step acts on its members."""
    instance: str | None = None
    """The object the step was planned on (R-K8S-8: a replacement is not acted on)."""
    unschedulable_grace_s: float | None = None
    """The schedule's unschedulable grace; None: the engine's."""

    @classmethod
    def of(cls, detail: Mapping[str, Any] | None) -> StepPlan:
        """The plan recorded in ``detail``; an absent key or a value of the wrong type reads as
        the default."""
        if not isinstance(detail, Mapping):
            return cls()
        return cls(
            persist_replicas=_flag(detail.get("persist_replicas")),
            allow_downtime=_flag(detail.get("allow_downtime")),
            interval_end=instant(detail, "interval_end"),
            endpoint=_flag(detail.get("endpoint")),
            instance=_text(detail.get("instance")),
            unschedulable_grace_s=_seconds(detail.get("unschedulable_grace_s")),
        )

    def as_detail(self) -> dict[str, Any]:
        """The JSON the planner writes on the step row (key for key, in this order)."""
        return {
            "persist_replicas": self.persist_replicas,
            "allow_downtime": self.allow_downtime,
            "interval_end": self.interval_end.isoformat()
            if self.interval_end is not None
            else None,
            "endpoint": self.endpoint,
            "instance": self.instance,
            "unschedulable_grace_s": self.unschedulable_grace_s,
        }


def instant(detail: Mapping[str, Any] | None, key: str) -> datetime | None:
    """The timezone-aware instant stored as ISO text under ``key`` of ``detail``; None when
    absent, not text, unparsable or naive."""
    if not isinstance(detail, Mapping):
        return None
    value = detail.get(key)
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.utcoffset() is not None else None


def _flag(value: object) -> bool:
    return value if isinstance(value, bool) else False


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


__all__ = ["RETRY_SINCE", "UNSCHEDULABLE_SINCE", "StepPlan", "instant"]
