"""The hand-over of equal intents on the page, in headless Chromium (the page's half of
``test_api_decided_by.py``).

At 09:30, ``late`` (p20, 09-10) is the window in force and ``early`` (p10, 08-09) has ended: the
instant table says ``late`` decided, and its note claims no override. Before the timeline split
at hand-overs the page showed the engine's merged 08-10 interval: ``early`` decided, with the
note "overrides late (priority 20 < 10)" for a window that wins.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from api_support import ADMIN, make_api
from live_server import serving
from test_api_decided_by import DOC
from test_api_ui_browser import browser_page, cell, login

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize(("at", "source"), [("09:30", "late"), ("08:30", "early")])
def test_the_instant_table_names_the_window_in_force_and_no_false_override(
    sqlite_url: str, at: str, source: str
) -> None:
    api = make_api(sqlite_url, start=datetime.fromisoformat(f"2026-10-21T{at}:00+00:00"))
    assert api.call("admin", "POST", ADMIN, json=DOC).status_code == 201
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/handover")
        assert page.locator("#instant-label").inner_text() == f"2026-10-21 {at}:00 +00:00"
        assert (cell(page, "md-llama70b", "desired"), cell(page, "md-llama70b", "decided-by")) == (
            "running",
            source,
        )
        assert "overrides" not in cell(page, "md-llama70b", "note")
