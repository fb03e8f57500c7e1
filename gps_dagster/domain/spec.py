"""Deploy schedule documents (SPEC §2, R-MODEL-1…9) as frozen pydantic models.

Parsing is split in two: ``Schedule.model_validate`` checks each field on its
own (types, enums, durations, crons, time zones, naive datetimes), and
``gps_dagster.domain.checks`` adds the cross-field rules (unknown targets,
duplicate window names, overlapping occurrences of one window, ambiguous
priorities over a one-year horizon). ``load_schedule`` runs both and raises
``SpecInvalid`` with every problem found, each with a field path, a reason
code and a fix text.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from gps_dagster.domain.crons import CronExpr, parse_cron
from gps_dagster.domain.documents import FieldErrorCarrier
from gps_dagster.domain.models import Frozen

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")
_SCOPE = re.compile(r"^(admin|cmp:[a-z0-9][a-z0-9-]{0,62})$")


class DesiredState(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"


class Mode(StrEnum):
    ENFORCE = "enforce"
    OBSERVE = "observe"


class TransitionOrder(StrEnum):
    RELEASE_FIRST = "release_first"
    ACQUIRE_FIRST = "acquire_first"


def parse_duration(text: str) -> timedelta:
    """Parse ``10h``, ``90m``, ``1d2h``, ``45s`` (elapsed time) into a timedelta."""
    match = _DURATION.match(text.strip()) if text else None
    if not text or match is None or not any(match.groups()):
        raise FieldErrorCarrier("invalid_duration", f"'{text}' is not a duration; use e.g. 10h, 90m, 1d2h")
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    value = timedelta(days=d, hours=h, minutes=m, seconds=s)
    if value <= timedelta(0):
        raise FieldErrorCarrier("duration_not_positive", "use a duration greater than zero, e.g. 10h")
    return value


def format_duration(value: timedelta) -> str:
    """Inverse of ``parse_duration`` (canonical form)."""
    total = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return "".join(parts) or "0s"


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise FieldErrorCarrier(
            "naive_datetime", "add a UTC offset, e.g. 2026-10-21T13:00:00+07:00 (RFC 3339)"
        )
    return value


class TargetSpec(Frozen):
    """A deploy the schedule owns (R-MODEL-2)."""

    model_deploy_id: str = Field(min_length=1, description="The deploy this schedule owns.")
    default_state: DesiredState = Field(description="State outside every window.")
    default_allow_downtime: bool = Field(
        default=False, description="Consent to stop an aliased deploy outside windows."
    )
    default_replicas: int | None = Field(
        default=None, ge=1, description="Replicas outside windows; None = never touch scale there."
    )


class StateSpec(Frozen):
    """What a window wants for one target (R-MODEL-4)."""

    model_deploy_id: str = Field(min_length=1)
    desired_state: DesiredState
    allow_downtime: bool | None = Field(default=None, description="None = inherit the target default.")
    replicas: int | None = Field(default=None, description="None = do not touch scale.")

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int | None) -> int | None:
        if value is not None and value == 0:
            raise FieldErrorCarrier("replicas_zero", 'use "desired_state": "stopped" to stop a deploy')
        if value is not None and value < 0:
            raise FieldErrorCarrier("replicas_negative", "use a replica count >= 1")
        return value


class _WindowBase(Frozen):
    name: str = Field(min_length=1, description="Unique in the schedule.")
    priority: int = Field(description="Higher wins when windows overlap.")
    states: tuple[StateSpec, ...] = Field(min_length=1)


class RecurringWindow(_WindowBase):
    """Occurrences start at each cron fire (schedule time zone) and last ``duration``."""

    kind: Literal["recurring"] = "recurring"
    cron: str = Field(description="5-field cron, evaluated in the schedule time zone.")
    duration: timedelta = Field(description="Elapsed time, e.g. 10h, 90m, 1d2h.")

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        parse_cron(value)  # raises FieldErrorCarrier (invalid_cron, cron_six_fields)
        return value

    @property
    def cron_expr(self) -> CronExpr:
        """The parsed cron (memoised by text)."""
        return parse_cron(self.cron)

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        if isinstance(value, timedelta):
            if value <= timedelta(0):
                raise FieldErrorCarrier("duration_not_positive", "use a duration greater than zero")
            return value
        if not isinstance(value, str):
            raise FieldErrorCarrier("invalid_duration", "use a string such as 10h, 90m or 1d2h")
        return parse_duration(value)


class OneShotWindow(_WindowBase):
    """One window ``[active_from, active_until)``, RFC 3339 with offsets."""

    kind: Literal["one_shot"] = "one_shot"
    active_from: datetime
    active_until: datetime

    @field_validator("active_from", "active_until")
    @classmethod
    def _offset(cls, value: datetime) -> datetime:
        return _aware(value)


Window = Annotated[RecurringWindow | OneShotWindow, Field(discriminator="kind")]
WINDOW_TAGS = frozenset({"recurring", "one_shot"})


class Schedule(Frozen):
    """A deploy schedule (R-MODEL-1)."""

    name: str = Field(description="Unique schedule name (lowercase, digits, . _ -).")
    timezone: str = Field(description="IANA time zone name, e.g. Asia/Ho_Chi_Minh.")
    mode: Mode = Mode.ENFORCE
    transition_order: TransitionOrder = TransitionOrder.RELEASE_FIRST
    scope: str = Field(default="admin", description="admin, or cmp:<project> for a tenant schedule.")
    enabled: bool = True
    targets: tuple[TargetSpec, ...] = Field(min_length=1)
    windows: tuple[Window, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise FieldErrorCarrier("invalid_name", "use lowercase letters, digits, '.', '_' or '-' (max 128)")
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise FieldErrorCarrier(
                "unknown_timezone", f"'{value}' is not an IANA time zone; use e.g. Asia/Ho_Chi_Minh"
            ) from None
        return value

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        if not _SCOPE.match(value):
            raise FieldErrorCarrier("invalid_scope", "use 'admin' or 'cmp:<project>'")
        return value

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def target_ids(self) -> tuple[str, ...]:
        return tuple(t.model_deploy_id for t in self.targets)

    def target(self, deploy_id: str) -> TargetSpec:
        for t in self.targets:
            if t.model_deploy_id == deploy_id:
                return t
        raise KeyError(deploy_id)

    @property
    def project(self) -> str | None:
        """The CMP project of a tenant schedule, None for an admin schedule."""
        return self.scope.split(":", 1)[1] if self.scope.startswith("cmp:") else None

    def to_document(self) -> dict[str, Any]:
        """The JSON-able document form (durations as text, datetimes RFC 3339)."""
        doc = self.model_dump(mode="json", exclude_defaults=False)
        for raw, win in zip(doc["windows"], self.windows, strict=True):
            if isinstance(win, RecurringWindow):
                raw["duration"] = format_duration(win.duration)
        return doc
