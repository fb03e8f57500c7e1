"""The sensors' cursors: what a tick remembers between ticks, as the text the orchestrator
stores (visible in its UI). Nothing in them decides what is due: the due index does."""

# Decisions embodied here (docs/decisions.md):
# * “Dagster finds due work by the index, and its cursor no longer decides what is due”
# * “The Dagster layer translates; the engine decides what a tick launches and says”
# * “The ops' and ticks' remaining rules are the engine's; one factory per kind of op”

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class ReconcileCursor:
    """Where paging stopped (last schedule visited) and the target status versions seen."""

    after: str = ""
    seen: dict[str, int] = field(default_factory=dict)
    automation: str | None = None
    """The automation warning last reported on the schedule assets ("" = all on)."""

    @classmethod
    def parse(cls, text: str | None) -> ReconcileCursor:
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(
            after=raw.get("after", ""),
            seen=dict(raw.get("seen", {})),
            automation=raw.get("automation"),
        )

    def dump(self) -> str:
        raw = {"after": self.after, "seen": self.seen, "automation": self.automation}
        return json.dumps(raw, sort_keys=True)


def parse_boundary_cursor(text: str | None) -> tuple[datetime | None, str | None]:
    """(previous tick, automation warning last reported) of the boundary sensor's cursor; an
    older cursor (a bare instant) has no warning reported yet."""
    if not text:
        return None, None
    if not text.startswith("{"):
        return datetime.fromisoformat(text), None
    raw = json.loads(text)
    at = raw.get("at")
    return (datetime.fromisoformat(at) if at else None), raw.get("automation")


def dump_boundary_cursor(at: datetime, warning: str | None) -> str:
    return json.dumps({"at": at.isoformat(), "automation": warning or None}, sort_keys=True)


def parse_seen(text: str | None) -> dict[str, str]:
    """The reservation sensor's cursor: the digest last recorded per reservation."""
    return dict(json.loads(text)) if text else {}


def dump_seen(seen: dict[str, str]) -> str:
    return json.dumps(seen, sort_keys=True)
