"""The execution gate and its event are one write (issue 9 §2.12)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.store import Store

T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)
EVENT_INSERT = re.compile(r'INSERT INTO ("?\w+"?\.)?"?events"?', re.IGNORECASE)


class EventWriteFailed(Exception):
    """The database refused the event row (disk full, connection lost, ...)."""


def test_set_gate_writes_the_value_and_its_event_in_one_transaction(db_url: str) -> None:
    store = Store.open(db_url)
    store.set_gate("observe", now=T0)

    def refuse_events(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if EVENT_INSERT.match(statement):
            raise EventWriteFailed(statement)

    sa.event.listen(store.engine, "before_cursor_execute", refuse_events)
    try:
        with pytest.raises(EventWriteFailed):
            store.set_gate("enforce", now=T0)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", refuse_events)
    assert store.get_gate() == "observe", "the gate changed but its gate_changed event was lost"
    gates = [e.detail for e in store.list_events() if e.kind == "gate_changed"]
    assert gates == [{"gate": "observe"}]
    store.set_gate("enforce", now=T0)
    assert store.get_gate() == "enforce"
    store.engine.dispose()
