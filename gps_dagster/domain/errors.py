"""One error root for the product, split by whether retrying can help.

User mistakes (a bad schedule file, a bad pool file) are ``SpecInvalid``: they
carry *every* problem found, each as a ``FieldError`` with a field path, a
machine reason code and a human fix text, so that the CLI can print them all
at once and never a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): one error stays one line.

    Fix texts and paths echo user values (a time zone, a field name); a newline
    or an ANSI escape inside one would forge extra output lines or colours.
    """
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _shown(text: str) -> str:
    line = one_line(text)
    return line if len(line) <= _LONGEST else line[: _LONGEST - 1] + "…"


_LONGEST = 600
"""Longest path/fix text kept: a megabyte-long field name is echoed as a prefix."""


class GpsError(Exception):
    """Root of every error the product raises on purpose."""


class PermanentError(GpsError):
    """Retrying the same call cannot succeed; something must change first."""


class TemporaryError(GpsError):
    """Retrying later may succeed (lost connection, lock busy, lag)."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem in a user document: where, what, and how to fix it."""

    path: str
    """Field path in the document, e.g. ``windows[0].states[1].replicas``."""
    reason: str
    """Stable machine reason code, e.g. ``replicas_zero``."""
    fix: str
    """What the user should do about it."""

    def __post_init__(self) -> None:
        for name in ("path", "reason", "fix"):
            object.__setattr__(self, name, _shown(str(getattr(self, name))))

    def __str__(self) -> str:
        return f"{self.path or '<document>'}: {self.reason} — {self.fix}"

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason, "fix": self.fix}


class SpecInvalid(PermanentError):
    """A user document was rejected; ``errors`` lists every problem found."""

    def __init__(self, errors: Iterable[FieldError], *, source: str | None = None) -> None:
        self.errors: tuple[FieldError, ...] = tuple(errors)
        self.source = None if source is None else one_line(source)
        head = f"{self.source}: " if self.source else ""
        lines = "\n".join(f"  {e}" for e in self.errors)
        super().__init__(f"{head}{len(self.errors)} problem(s)\n{lines}")

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(e.reason for e in self.errors)
