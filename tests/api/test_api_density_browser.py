"""The worst schedules validation accepts, opened on the page in headless Chromium.

The server side of every page load (the HTML, the timeline JSON its script fetches) spends at
most ``WORK_BUDGET`` evaluator units and less than 50 MB traced in this process (the server
runs here); the browser side draws the chart and the instant table with a JavaScript heap under
50 MB (Chromium's own ``JSHeapUsedSize``, through the DevTools protocol). Before the closed-form
occurrence merge, one ``/timeline`` of ``every-minute-x200`` listed 200 × 10,080 occurrences
(≈ 11 s, ≈ 170 MB): the units check catches a return to listing them, the heap check a page
that ships every occurrence to the browser.
"""

from __future__ import annotations

import tracemalloc
from datetime import datetime

import pytest
from api_support import ADMIN, make_api
from live_server import serving
from test_api_density import MB, TARGETS, WORST, dense
from test_api_ui_browser import browser_page, cell, login

from gps_dagster.domain.occurrences import WORK_BUDGET, total_units

pytestmark = [pytest.mark.slow]

START = datetime.fromisoformat("2026-10-21T10:00:30-04:00")  # inside a 1-minute window


@pytest.mark.parametrize("name", sorted(WORST))
def test_the_page_of_the_worst_accepted_schedules_is_bounded_on_both_sides(
    sqlite_url: str, name: str
) -> None:
    api = make_api(sqlite_url, start=START)
    created = api.call("admin", "POST", ADMIN, json=dense(name, WORST[name]))
    assert created.status_code == 201, created.text
    with serving(api.client.app) as url, browser_page() as page:
        tracemalloc.start()
        try:
            before = total_units()
            login(page, url, api.tokens["admin"], f"/ui/schedules/{name}")
            units, peak = total_units() - before, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert 0 < units <= WORK_BUDGET, units
        assert peak < 50 * MB, peak
        # The page is drawn, not an error: the instant table holds both targets at the clock.
        assert page.locator("#instant-label").inner_text() == "2026-10-21 10:00:30 -04:00"
        assert {cell(page, t, "desired") for t in TARGETS} == {"running", "stopped"}
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        heap = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}[
            "JSHeapUsedSize"
        ]
        assert 0 < heap < 50 * MB, heap
