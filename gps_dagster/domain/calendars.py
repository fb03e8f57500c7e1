"""Public-holiday calendars for a recurring window's ``skip`` (R-NEXT-2).

Why a package and not a table of our own: ``holidays`` (PyPI) ships offline
data for ~150 countries and their subdivisions, lunar and substituted days
included, and is kept current upstream. It is pure data (no I/O, no clock), so
the domain may ask it. Which version decided is part of the schedule document
(``HolidayCalendar.decided_by``): upgrading the package is a visible change of
the stored document, and a changed table a visible change of the timeline.

A day is skipped when it is a holiday of the calendar in the given categories,
or one of the window's explicit ``dates``. Days are *local dates of the
schedule's zone*: an occurrence is skipped when its start falls on one.
"""

# Decisions embodied here (docs/decisions.md):
# * “Holidays: `holidays` decides, its version is part of the document”

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from functools import lru_cache

import holidays as _holidays
from holidays.version import __version__ as _holidays_version

from gps_dagster.domain.documents import FieldErrorCarrier

__all__ = ["PACKAGE", "SkipDays", "check_calendar", "holiday_names"]

PACKAGE = f"holidays {_holidays_version}"
"""The package and version that decides what a holiday is (recorded in each calendar)."""
MIN_YEAR, MAX_YEAR = 1900, 2200
"""Years the calendars are asked about; outside them no day is a holiday (the data ends)."""


def check_calendar(country: str, subdivision: str | None, categories: Iterable[str]) -> None:
    """Refuse an unknown country, subdivision or category, with the field and the fix."""
    supported = _holidays.list_supported_countries()
    if country not in supported:
        near = sorted(c for c in supported if c[:1] == country[:1].upper())[:8]
        raise FieldErrorCarrier(
            "unknown_country",
            f"'{country}' is not a country {PACKAGE} knows; use an ISO 3166-1 alpha-2 code, "
            f"e.g. VN, US, DE{' (' + ', '.join(near) + ' start with that letter)' if near else ''}",
            "country",
        )
    table = _table(country, None, ())
    if subdivision is not None and subdivision not in table.subdivisions:
        shown = ", ".join(table.subdivisions[:12]) or "none"
        raise FieldErrorCarrier(
            "unknown_subdivision",
            f"'{subdivision}' is not a subdivision of {country} in {PACKAGE}; use one of: "
            f"{shown}{' …' if len(table.subdivisions) > 12 else ''}, or drop the field",
            "subdivision",
        )
    for i, cat in enumerate(categories):
        if cat not in table.supported_categories:
            raise FieldErrorCarrier(
                "unknown_category",
                f"'{cat}' is not a holiday category of {country} in {PACKAGE}; use one of: "
                f"{', '.join(table.supported_categories)}",
                f"categories[{i}]",
            )


@lru_cache(maxsize=256)
def _table(
    country: str, subdivision: str | None, categories: tuple[str, ...]
) -> _holidays.HolidayBase:
    return _holidays.country_holidays(
        country, subdiv=subdivision, years=[], categories=categories or None
    )


@lru_cache(maxsize=4096)
def _year(
    country: str, subdivision: str | None, categories: tuple[str, ...], year: int
) -> dict[date, str]:
    if not MIN_YEAR <= year <= MAX_YEAR:
        return {}
    table = _holidays.country_holidays(
        country, subdiv=subdivision, years=year, categories=categories or None
    )
    return {d: str(name) for d, name in table.items() if d.year == year}


def holiday_names(
    country: str, subdivision: str | None, categories: tuple[str, ...], day: date
) -> str | None:
    """The holiday's name(s) on ``day`` in that calendar, None when it is not one."""
    return _year(country, subdivision, categories, day.year).get(day)


class SkipDays:
    """Which local dates a window skips: a holiday calendar and/or explicit dates."""

    __slots__ = ("calendar", "dates")

    def __init__(
        self,
        calendar: tuple[str, str | None, tuple[str, ...]] | None,
        dates: Iterable[date] = (),
    ) -> None:
        self.calendar = calendar
        self.dates = frozenset(dates)

    def reason(self, day: date) -> str | None:
        """Why ``day`` is skipped (the holiday's name, or ``listed date``), None when it is not."""
        if day in self.dates:
            return "listed date"
        if self.calendar is None:
            return None
        return holiday_names(*self.calendar, day)

    def skips(self, day: date) -> bool:
        return self.reason(day) is not None
