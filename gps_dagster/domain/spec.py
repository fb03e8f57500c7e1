"""Deploy schedule documents (R-MODEL-1…9) as frozen pydantic models.

Parsing is split in two: ``Schedule.model_validate`` checks each field on its
own (types, enums, durations, crons, time zones, naive datetimes), and
``gps_dagster.domain.checks`` adds the cross-field rules (unknown targets,
duplicate window names, overlapping occurrences of one window, ambiguous
priorities). ``load_schedule`` runs both and raises ``SpecInvalid`` with every
problem found, each with a field path, a reason code and a fix text.

Schedule documents are strict: a number where text is expected (or ``"10"``,
``10.0``, ``"yes"`` where a whole number or a boolean is) is an error naming
the expected type, never a silent coercion. Every number is bounded so that
nothing downstream (timedelta, the database, the control plane) overflows.
"""

# Decisions embodied here (docs/decisions.md):
# * “One-shot instants lie in [1970-01-01, 9000-01-01)”
# * “At most 200 windows per schedule”
# * “Documents are strict and bounded”
# * “Identifier patterns end with `\Z`, not `$`”
# * “The unschedulable grace is the schedule's”
# * “Schedule names are per scope: a tenant schedule is `<project>/<name>`”

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from gps_dagster.domain.calendars import PACKAGE, SkipDays, check_calendar
from gps_dagster.domain.crons import CronExpr, parse_cron
from gps_dagster.domain.documents import FieldErrorCarrier
from gps_dagster.domain.models import Frozen

_DURATION = re.compile(r"^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?\Z")
_NAME = re.compile(r"^(?:[a-z0-9][a-z0-9-]{0,62}/)?[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?\Z")
MAX_NAME = 128
"""Longest schedule name, a tenant's ``<project>/`` prefix included (the store's key width)."""
_SCOPE = re.compile(r"^(admin|cmp:[a-z0-9][a-z0-9-]{0,62})\Z")

_ZONE = re.compile(r"^[A-Za-z0-9_+-]{1,30}(?:/[A-Za-z0-9_+-]{1,30}){0,3}\Z")

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
"""First instant a one-shot window may name (the epoch: nothing is scheduled before it)."""
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""Instants from here on are refused: far enough for "forever", far from datetime's year 9999."""
MAX_DURATION = timedelta(days=3660)
"""Longest recurring duration (ten years; longer than any gap between two fires of a cron)."""
MAX_REPLICAS = 10_000
"""Most replicas a schedule may ask of one deploy (far below the control plane's int32)."""
MAX_PRIORITY = 1_000_000_000
"""Priorities lie in [-MAX_PRIORITY, MAX_PRIORITY]."""
MAX_WINDOWS = 200
MAX_GRACE_S = 86_400.0
"""Longest unschedulable grace a schedule may set (a day: past the readiness timeout anyway)."""
"""Most windows in one schedule: bounds validation (pairs of equal priority) and evaluation."""
MAX_DEPLOY_ID = 200
"""Longest deploy id (the store's column width)."""
MAX_SKIP_DATES = 1_000
"""Most explicit dates one window may skip (a company calendar for decades)."""
_COUNTRY = re.compile(r"^[A-Z]{2,3}$")


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
    """Parse ``10h``, ``90m``, ``1d2h``, ``45s`` (elapsed, <= MAX_DURATION) into a timedelta."""
    match = _DURATION.match(text.strip()) if text and len(text) <= 40 else None
    if not text or match is None or not any(match.groups()):
        shown = text if len(text) <= 40 else text[:40] + "…"
        fix = f"'{shown}' is not a duration; use e.g. 10h, 90m, 1d2h"
        raise FieldErrorCarrier("invalid_duration", fix)
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    seconds = d * 86_400 + h * 3_600 + m * 60 + s  # whole ints first: timedelta() overflows
    return _bounded(timedelta(seconds=seconds) if seconds <= MAX_DURATION.total_seconds() else None)


def _bounded(value: timedelta | None) -> timedelta:
    if value is None or value > MAX_DURATION:
        raise FieldErrorCarrier(
            "duration_too_long",
            f"use at most {MAX_DURATION.days}d; a window longer than every gap between its fires "
            "overlaps itself anyway",
        )
    if value <= timedelta(0):
        raise FieldErrorCarrier(
            "duration_not_positive", "use a duration greater than zero, e.g. 10h"
        )
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
    if not EARLIEST <= value < LATEST:
        raise FieldErrorCarrier(
            "instant_out_of_range",
            f"use an instant from {EARLIEST.date()} to before {LATEST.date()}, "
            "e.g. 2026-10-21T13:00:00+07:00",
        )
    return value


def _instant_text(value: Any) -> Any:
    """RFC 3339 text (or a datetime from a caller); a number is not silently an epoch."""
    if isinstance(value, (str, datetime)):
        return value
    raise FieldErrorCarrier(
        "invalid_datetime", "use RFC 3339 text with an offset, e.g. 2026-10-21T13:00:00+07:00"
    )


class TargetSpec(Frozen):
    """A deploy the schedule owns (R-MODEL-2)."""

    model_deploy_id: str = Field(
        min_length=1, max_length=MAX_DEPLOY_ID, description="The deploy this schedule owns."
    )
    default_state: DesiredState = Field(description="State outside every window.")
    default_allow_downtime: bool = Field(
        default=False, strict=True, description="Consent to stop an aliased deploy outside windows."
    )
    default_replicas: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICAS,
        strict=True,
        description="Replicas outside windows; None = never touch scale there.",
    )
    ready_by: bool | None = Field(
        default=None,
        strict=True,
        description="Act early so the deploy is READY at each boundary that starts it (R-NEXT-1); "
        "None = the schedule's ready_by.",
    )


class StateSpec(Frozen):
    """What a window wants for one target (R-MODEL-4)."""

    model_deploy_id: str = Field(min_length=1, max_length=MAX_DEPLOY_ID)
    desired_state: DesiredState
    allow_downtime: bool | None = Field(
        default=None, strict=True, description="None = inherit the target default."
    )
    replicas: int | None = Field(
        default=None, strict=True, description="None = do not touch scale."
    )

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int | None) -> int | None:
        if value is not None and value == 0:
            raise FieldErrorCarrier(
                "replicas_zero", 'use "desired_state": "stopped" to stop a deploy'
            )
        if value is not None and value < 0:
            raise FieldErrorCarrier("replicas_negative", "use a replica count >= 1")
        if value is not None and value > MAX_REPLICAS:
            raise FieldErrorCarrier("too_large", f"use a replica count <= {MAX_REPLICAS}")
        return value


class _WindowBase(Frozen):
    name: str = Field(min_length=1, max_length=128, description="Unique in the schedule.")
    priority: int = Field(
        strict=True,
        ge=-MAX_PRIORITY,
        le=MAX_PRIORITY,
        description="Higher wins when windows overlap.",
    )
    states: tuple[StateSpec, ...] = Field(min_length=1)


class HolidayCalendar(Frozen):
    """Public holidays of a country (and subdivision), decided by the ``holidays`` package."""

    country: str = Field(description="ISO 3166-1 alpha-2 code, e.g. VN, US, DE.")
    subdivision: str | None = Field(
        default=None,
        description="ISO 3166-2 subdivision of the country, e.g. CA for US; None = national.",
    )
    categories: tuple[str, ...] = Field(
        default=("public",),
        min_length=1,
        max_length=8,
        description="Holiday categories of that country, e.g. public, bank, optional.",
    )
    decided_by: str = Field(
        default=PACKAGE,
        validate_default=True,
        description=(
            "Set on validation: the package version whose tables decide (any given value is "
            "replaced)."
        ),
    )

    @field_validator("country")
    @classmethod
    def _country(cls, value: str) -> str:
        if not _COUNTRY.match(value):
            raise FieldErrorCarrier(
                "unknown_country",
                f"'{value[:40]}' is not a country code; use ISO 3166-1 alpha-2 in capitals, "
                "e.g. VN",
            )
        return value

    @field_validator("decided_by")
    @classmethod
    def _decided_by(cls, value: str) -> str:
        return PACKAGE

    @model_validator(mode="after")
    def _known(self) -> HolidayCalendar:
        check_calendar(self.country, self.subdivision, self.categories)
        return self

    @property
    def key(self) -> tuple[str, str | None, tuple[str, ...]]:
        return (self.country, self.subdivision, self.categories)


class SkipSpec(Frozen):
    """Occurrences that *start* on one of these local dates do not fire (R-NEXT-2)."""

    holidays: HolidayCalendar | None = Field(default=None, description="A public-holiday calendar.")
    dates: tuple[date, ...] = Field(
        default=(),
        max_length=MAX_SKIP_DATES,
        description="Explicit local dates (YYYY-MM-DD) to skip, e.g. company days.",
    )

    @field_validator("dates", mode="before")
    @classmethod
    def _date_text(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            for item in value:
                if not isinstance(item, (str, date)) or isinstance(item, datetime):
                    raise FieldErrorCarrier(
                        "invalid_date", 'list local dates as text, e.g. "2026-12-31"'
                    )
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> SkipSpec:
        if self.holidays is None and not self.dates:
            raise FieldErrorCarrier(
                "empty_skip",
                "name a holiday calendar ({holidays: {country: VN}}) or dates, or drop skip",
            )
        return self

    def days(self) -> SkipDays:
        return SkipDays(self.holidays.key if self.holidays else None, self.dates)


class RecurringWindow(_WindowBase):
    """Occurrences start at each cron fire (schedule time zone) and last ``duration``."""

    kind: Literal["recurring"] = "recurring"
    cron: str = Field(description="5-field cron, evaluated in the schedule time zone.")
    duration: timedelta = Field(description="Elapsed time, e.g. 10h, 90m, 1d2h.")
    skip: SkipSpec | None = Field(
        default=None, description="Days whose occurrences do not fire: holidays and/or dates."
    )

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
            return _bounded(value)
        if not isinstance(value, str):
            raise FieldErrorCarrier("invalid_duration", "use a string such as 10h, 90m or 1d2h")
        return parse_duration(value)


class OneShotWindow(_WindowBase):
    """One window ``[active_from, active_until)``, RFC 3339 with offsets."""

    kind: Literal["one_shot"] = "one_shot"
    active_from: datetime
    active_until: datetime

    @field_validator("active_from", "active_until", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _instant_text(value)

    @field_validator("active_from", "active_until")
    @classmethod
    def _offset(cls, value: datetime) -> datetime:
        return _aware(value)


Window = Annotated[RecurringWindow | OneShotWindow, Field(discriminator="kind")]
WINDOW_TAGS = frozenset({"recurring", "one_shot"})


class Schedule(Frozen):
    """A deploy schedule (R-MODEL-1)."""

    name: str = Field(
        description="Schedule name (lowercase, digits, . _ -), unique within its scope. A tenant "
        "schedule's name is qualified by its project, ``vision/gpu42-shared``: a bare name in a "
        "cmp:<project> document gets the prefix (R-API: names are per scope)."
    )
    timezone: str = Field(description="IANA time zone name, e.g. Asia/Ho_Chi_Minh.")
    mode: Mode = Mode.ENFORCE
    transition_order: TransitionOrder = TransitionOrder.RELEASE_FIRST
    scope: str = Field(
        default="admin", description="admin, or cmp:<project> for a tenant schedule."
    )
    enabled: bool = Field(default=True, strict=True)
    ready_by: bool = Field(
        default=False, strict=True, description="Default of every target's ready_by (R-NEXT-1)."
    )
    unschedulable_grace_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_GRACE_S,
        strict=True,
        description=(
            "Seconds the pods of a start in this pool may stay unschedulable before "
            "start_unschedulable; None = the engine's unschedulable_grace_s (120 s). Raise it for "
            "a pool whose GPU nodes an autoscaler without scale-up events (Karpenter) adds."
        ),
    )
    targets: tuple[TargetSpec, ...] = Field(min_length=1)
    windows: tuple[Window, ...] = ()

    @field_validator("windows", mode="before")
    @classmethod
    def _window_count(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)) and len(value) > MAX_WINDOWS:
            raise FieldErrorCarrier(
                "too_many_windows",
                f"{len(value)} windows; a schedule holds at most {MAX_WINDOWS}: drop past one-shot "
                "windows, merge windows with one cron list (e.g. '0 8,20 * * *'), or split the "
                "targets into several schedules",
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _qualify(cls, data: Any) -> Any:
        """A tenant schedule's identity is ``<project>/<name>``: one namespace per scope."""
        if isinstance(data, dict):
            scope, name = data.get("scope"), data.get("name")
            if (
                isinstance(scope, str)
                and _SCOPE.match(scope)
                and scope.startswith("cmp:")
                and isinstance(name, str)
                and "/" not in name
            ):
                data = {**data, "name": f"{scope[4:]}/{name}"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value) or len(value) > MAX_NAME:
            raise FieldErrorCarrier(
                "invalid_name",
                f"use lowercase letters, digits, '.', '_' or '-' (at most {MAX_NAME} "
                "characters, a tenant schedule's '<project>/' prefix included)",
            )
        return value

    @model_validator(mode="after")
    def _name_in_scope(self) -> Schedule:
        prefix, sep, _ = self.name.rpartition("/")
        if sep and prefix != self.project:
            raise FieldErrorCarrier(
                "name_scope_mismatch",
                f"'{prefix}/' names project '{prefix}' but the scope is '{self.scope}': "
                f"drop the prefix (the scope gives it), or set scope 'cmp:{prefix}'",
                path="name",
            )
        return self

    @property
    def local_name(self) -> str:
        """The name within its scope (``gpu42-shared`` of ``vision/gpu42-shared``)."""
        return self.name.rpartition("/")[2]

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            if not _ZONE.match(value):
                raise ValueError(value)
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory, a long name
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

    def is_ready_by(self, deploy_id: str) -> bool:
        """Whether the engine acts early so ``deploy_id`` is READY at its starting boundaries."""
        own = self.target(deploy_id).ready_by
        return self.ready_by if own is None else own

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
                if win.skip is None:
                    del raw["skip"]  # documents without a skip stay as they were
        for raw_target in doc["targets"]:
            if raw_target.get("ready_by") is None:
                raw_target.pop("ready_by", None)  # documents without ready_by stay as they were
        if not self.ready_by:
            doc.pop("ready_by", None)
        if self.unschedulable_grace_s is None:
            doc.pop("unschedulable_grace_s", None)  # documents without it stay as they were
        return doc
