"""Schedule records with their parsed specs cached by content (decision "Parsed schedules are cached
by content").

Validating a schedule document with pydantic costs about half a millisecond;
the boundary sensor used to do it for every schedule every second (6.6 s per
tick at 10,000). A document is immutable for one ``spec_sha`` (its SHA-256,
kept in ``schedule_due``), so the parsed ``Schedule`` is cached by
(name, sha): a page of schedules reads only the small columns, and fetches
and parses only the documents it has not seen. Keyed by content rather than
version: a schedule deleted and created again restarts at version 1.
"""

# Decisions embodied here (docs/decisions.md):
# * “Parsed schedules are cached by content”

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gps_dagster.domain.spec import Schedule
from gps_dagster.store import tables as t
from gps_dagster.store.due import spec_sha
from gps_dagster.store.records import ScheduleRecord
from gps_dagster.store.scale_tables import schedule_due

MAX_CACHED = 50_000
_CACHE: dict[tuple[str, str], Schedule] = {}

_s = t.schedules
META = (_s.c.name, _s.c.version, _s.c.enabled, _s.c.created_at, _s.c.updated_at)


def load(
    conn: Connection,
    *where: Any,
    limit: int | None = None,
    ordered: bool = True,
) -> list[ScheduleRecord]:
    """Records of the schedules matching ``where`` (name order), parsing only unseen documents."""
    query = sa.select(*META, schedule_due.c.spec_sha).select_from(
        _s.outerjoin(schedule_due, schedule_due.c.name == _s.c.name)
    )
    query = query.where(*where)
    if ordered:
        query = query.order_by(_s.c.name)
    if limit is not None:
        query = query.limit(limit)
    rows = conn.execute(query).all()
    missing = [r.name for r in rows if r.spec_sha is None or (r.name, r.spec_sha) not in _CACHE]
    fresh = _fetch(conn, missing) if missing else {}
    out: list[ScheduleRecord] = []
    for r in rows:
        record = fresh.get(r.name)
        if record is None:
            spec = _CACHE.get((r.name, r.spec_sha or ""))
            if spec is None:
                continue  # deleted between the two reads
            record = ScheduleRecord(r.name, r.version, spec, r.enabled, r.created_at, r.updated_at)
        out.append(record)
    return out


def _fetch(conn: Connection, names: Sequence[str]) -> dict[str, ScheduleRecord]:
    """Whole rows (one consistent read per row) of the schedules whose spec is not cached."""
    out: dict[str, ScheduleRecord] = {}
    if len(_CACHE) + len(names) > MAX_CACHED:
        _CACHE.clear()
    for i in range(0, len(names), 1000):
        chunk = list(names[i : i + 1000])
        for row in conn.execute(sa.select(*META, _s.c.document).where(_s.c.name.in_(chunk))):
            spec = Schedule.model_validate(row.document)
            _CACHE[(row.name, spec_sha(row.document))] = spec
            out[row.name] = ScheduleRecord(
                row.name, row.version, spec, row.enabled, row.created_at, row.updated_at
            )
    return out
