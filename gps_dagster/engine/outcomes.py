"""Mapping what the core said to a target phase, reason and fix text.

Consent and refusals are typed (SPEC R-PASS-8): the engine never guesses a
phase from an error message, only from the error's class and reason code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gps_dagster.domain.phases import INELIGIBLE_FIXES, Phase, fix_for
from gps_dagster.ports import (
    AdmissionRefused,
    AliasGuardUnavailable,
    BillingRefused,
    CoreError,
    NotFound,
    QuotaRefused,
    Unsupported,
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A terminal outcome for a target: phase, reason code, fix text, detail."""

    phase: Phase
    reason: str
    fix: str
    detail: dict[str, Any] | None = None

    def changes(self) -> dict[str, Any]:
        return {
            "phase": self.phase.value,
            "reason": self.reason,
            "fix": self.fix,
            "detail": self.detail,
        }


def verdict(
    phase: Phase,
    reason: str | None = None,
    *,
    extra: str = "",
    detail: dict[str, Any] | None = None,
) -> Verdict:
    fix = fix_for(phase, reason)
    return Verdict(phase, reason or phase.value, f"{extra} — {fix}" if extra else fix, detail)


def from_core_error(exc: CoreError) -> Verdict:
    """The terminal verdict for a permanent refusal by the core."""
    message = str(exc)
    if isinstance(exc, QuotaRefused):
        return verdict(
            Phase.QUOTA_REFUSED,
            extra=message,
            detail={
                "project": exc.project,
                "quota": exc.quota,
                "used": exc.used,
                "requested": exc.requested,
            },
        )
    if isinstance(exc, BillingRefused):
        return verdict(Phase.BILLING_REFUSED, extra=message, detail={"project": exc.project})
    if isinstance(exc, AliasGuardUnavailable):
        return verdict(
            Phase.ALIAS_BLOCKED,
            f"alias_guard_{exc.reason}",
            extra=f"alias guard {exc.reason}: {message}",
        )
    if isinstance(exc, AdmissionRefused):
        if exc.reason == "reservation_overcommitted":
            return verdict(Phase.RESERVATION_OVERCOMMITTED, extra=message)
        if exc.reason == "alias_requires_consent":
            return verdict(Phase.ALIAS_BLOCKED, exc.reason, extra=message)
        return verdict(Phase.QUOTA_REFUSED, exc.reason, extra=f"core admission refused: {message}")
    if isinstance(exc, Unsupported):
        reason = exc.reason if exc.reason in INELIGIBLE_FIXES else "unsupported_scale_for_mode"
        return verdict(Phase.INELIGIBLE, reason, extra=message, detail={"core_reason": exc.reason})
    if isinstance(exc, NotFound):
        return verdict(Phase.INELIGIBLE, "target_failed", extra=message)
    return verdict(Phase.INELIGIBLE, "core_refused", extra=f"{type(exc).__name__}: {message}")
