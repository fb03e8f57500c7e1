"""A new version applied while the sweep reads its page keeps its "due now" mark (issue 25 #3).

The sweep reads a page of schedules, then their due rows. A version applied in between marked
the schedule due (a new revision) — and the sweep, visiting the stale record with the new
revision in hand, wrote the stale version's next boundary over the mark: the edit waited for
the sweep to come back (~50 min at 10,000 schedules) or for the old version's boundary. Here a
second store (another connection, as another process's apply) applies the edit at that moment.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.store import Store
from gps_dagster.store.records import ScheduleRecord
from tests.engine.night_fleet import night_pool, night_schedule

T0 = datetime.fromisoformat("2026-10-19T12:00:00+07:00")


def afternoon_off(i: int) -> dict[str, Any]:
    """Version 2: d{i}-a stopped from 12:00 (a window that covers now)."""
    doc = night_schedule(i)
    doc["windows"][0]["cron"] = "0 12 * * *"
    return doc


class EditDuringPage(Store):
    """The real store; right after one page read, another connection applies a new version."""

    editor: Store | None = None

    def page_schedules(
        self, after: str | None, limit: int, *, scope: str | None = None
    ) -> list[ScheduleRecord]:
        page = super().page_schedules(after, limit, scope=scope)
        if self.editor is not None and page:  # the read whose records the sweep visits
            editor, self.editor = self.editor, None
            editor.apply_schedule(load_schedule(afternoon_off(0)), now=self.clock_now)
        return page

    clock_now: datetime = T0


@pytest.mark.postgres
def test_an_edit_between_the_page_and_its_due_rows_is_planned_at_once(pg_url: str) -> None:
    clock = VirtualClock(T0)
    setup = Store.open(pg_url)
    pool = SimPool.create(setup.engine, load_pool(night_pool(1)), clock)
    setup.apply_schedule(load_schedule(night_schedule(0)), now=clock.now())
    setup.set_gate("enforce", now=clock.now())
    store = EditDuringPage(setup.engine)
    engine = Engine(store, pool, clock, EngineConfig(holder="solo", page_size=1))  # 1 read
    engine.run_pass()  # version 1 planned: nothing to do before 22:00
    clock.advance(30)
    store.editor, store.clock_now = Store.open(pg_url, upgrade=False), clock.now()
    engine.run_pass()  # the sweep's page is read, then version 2 is applied
    assert store.find_schedule("s0000").version == 2  # type: ignore[union-attr]
    due = store.due_at("s0000")
    assert due is not None and due <= clock.now(), due  # the mark of the edit is still there
    clock.advance(2)
    engine.run_pass()
    stops = [a for a in store.list_actions(deploy_id="d0-a") if a.step == "stop"]
    assert [a.schedule_version for a in stops] == [2]


class GateDuringPage(Store):
    """The real store; right after one page read, another connection sets the gate."""

    setter: Store | None = None
    at: datetime = T0

    def page_schedules(
        self, after: str | None, limit: int, *, scope: str | None = None
    ) -> list[ScheduleRecord]:
        page = super().page_schedules(after, limit, scope=scope)
        if self.setter is not None and page:
            setter, self.setter = self.setter, None
            setter.set_gate("enforce", now=self.at)
        return page


@pytest.mark.postgres
def test_a_gate_change_between_the_page_and_its_due_rows_is_served_at_once(pg_url: str) -> None:
    """Issue 25 #8, a sibling of #3: the gate's "every schedule is due" mark is not lost."""
    clock = VirtualClock(T0)
    setup = Store.open(pg_url)
    pool = SimPool.create(setup.engine, load_pool(night_pool(1)), clock)
    setup.apply_schedule(load_schedule(afternoon_off(0)), now=clock.now())
    setup.set_gate("observe", now=clock.now())
    store = GateDuringPage(setup.engine)
    engine = Engine(store, pool, clock, EngineConfig(holder="solo", page_size=1))
    engine.run_pass()  # observe: computed and recorded, nothing submitted
    assert store.list_actions() == []
    clock.advance(30)
    store.setter, store.at = Store.open(pg_url, upgrade=False), clock.now()
    engine.run_pass()  # the sweep's page is read, then the gate turns to enforce
    assert store.get_gate() == "enforce"
    due = store.due_at("s0000")
    assert due is not None and due <= clock.now(), due
    clock.advance(2)
    engine.run_pass()
    assert [a.step for a in store.list_actions(deploy_id="d0-a")] == ["stop"]
