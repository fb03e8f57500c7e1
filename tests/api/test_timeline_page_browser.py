"""The timeline page as a new user meets it (issue 20 §3), in headless Chromium.

* it opens at now: the instant table lists the targets at the server's clock, a "now" line;
* a schedule of 2-minute windows (the demo's) opens at the hour span, where a window is tens
  of pixels wide instead of a third of a pixel of a week;
* the reservation chart's axis holds the whole stack, also when the stack passes the GPU's
  memory (a refusal): the bar is never clipped;
* a bad ``?week=`` answers 400 with the field, the reason and the fix — not a blank page.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from api_support import ADMIN, ROOT, make_api, seed
from live_server import serving
from test_api_ui_browser import GPU42_POOL, MONDAY, SEED_POOL, browser_page, cell, login

pytestmark = [pytest.mark.slow]

DEMO_POOL = ROOT / "examples" / "demo-pool.yaml"


def test_the_page_opens_at_now_with_the_instant_table_at_now(
    sqlite_url: str, tmp_path: Path
) -> None:
    api = make_api(sqlite_url, pool=SEED_POOL, start=MONDAY)  # Monday 09:00 +07
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/gpu-pool-h100-shared")
        assert page.locator("#instant-label").inner_text() == "2026-10-19 09:00:00 +07:00"
        assert page.get_attribute("body", "data-span") == "week"  # 9-hour windows: a week reads
        assert (cell(page, "md-llama70b", "desired"), cell(page, "md-llama70b", "decided-by")) == (
            "running",
            "business-hours",
        )
        now = page.evaluate(
            "document.getElementById('chart').layout.shapes.filter((s) => s.name === 'now')"
            ".map((s) => s.x0)"
        )
        assert now == ["2026-10-19 09:00:00"]
        page.screenshot(path=str(tmp_path / "opens-at-now.png"), full_page=True)


def test_two_minute_windows_open_at_the_hour_span_and_are_readable(
    sqlite_url: str, tmp_path: Path
) -> None:
    start = datetime.fromisoformat("2026-10-19T09:01:00+00:00")
    api = make_api(sqlite_url, pool=DEMO_POOL, start=start)
    demo = json.loads((ROOT / "examples" / "demo-schedule.json").read_text())
    assert api.call("admin", "POST", ADMIN, json=demo).status_code == 201, "demo schedule refused"
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/demo-swap")
        page.wait_for_selector('body[data-span="1h"]', timeout=30_000)
        assert (
            page.locator("#range")
            .inner_text()
            .startswith("2026-10-19 08:50:00 → 2026-10-19 09:50:00")
        )
        assert page.locator("#instant-label").inner_text() == "2026-10-19 09:01:00 +00:00"
        assert cell(page, "md-llama70b", "desired") == "running"  # 09:00-09:02 window in force
        width = page.evaluate(
            "window.gpsTimeline.clientX('2026-10-19 09:02:00') - "
            "window.gpsTimeline.clientX('2026-10-19 09:00:00')"
        )
        assert width >= 20, f"a 2-minute window is {width} px wide"
        page.screenshot(path=str(tmp_path / "two-minute-windows.png"), full_page=True)
        page.select_option("#span", "week")  # the operator can still widen it
        page.wait_for_selector('body[data-span="week"]', timeout=30_000)
        assert (
            page.locator("#range")
            .inner_text()
            .startswith("2026-10-19 00:00:00 → 2026-10-26 00:00:00")
        )


def test_the_reservation_bar_is_never_clipped(sqlite_url: str) -> None:
    api = make_api(sqlite_url, pool=GPU42_POOL, start=MONDAY)
    token = api.services.tokens.create("vision", "cmp:vision", now=MONDAY, actor="test")[1]
    schedule = json.loads((ROOT / "examples" / "gpu42-schedule.json").read_text())
    answer = api.client.post(
        "/api/v1/cmp/projects/vision/deploy-schedules",
        json=schedule,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 201, answer.text
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, token, "/ui/schedules/gpu42-shared?week=2026-10-19")
        box = page.locator("#rsv-rsv-gpu42-shared")
        box.wait_for(timeout=30_000)
        box.locator("select.member").select_option("md-vision-chat")
        slider = box.locator("input.slider")
        slider.evaluate("(el) => { el.value = el.max; el.dispatchEvent(new Event('input')); }")
        page.wait_for_selector('#rsv-rsv-gpu42-shared[data-verdict="refused"]', timeout=30_000)
        total = int(box.get_attribute("data-total") or 0)
        assert total > 143_771  # the stack passes the GPU's memory
        top = page.evaluate(
            "document.getElementById('rsv-chart-rsv-gpu42-shared').layout.xaxis.range[1]"
        )
        assert top >= total, f"axis ends at {top} MiB, the stack at {total} MiB"


@pytest.mark.parametrize(
    ("query", "field"),
    [("week=2026-13-45", "week"), ("week=monday", "week"), ("span=2m", "span")],
)
def test_a_bad_query_says_what_is_wrong_instead_of_a_blank_page(
    sqlite_url: str, query: str, field: str
) -> None:
    api = make_api(sqlite_url, pool=SEED_POOL, start=MONDAY)
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/gpu-pool-h100-shared")
        answer = page.goto(f"{url}/ui/schedules/gpu-pool-h100-shared?{query}")
        assert answer is not None and answer.status == 400
        error = page.locator("#query-error").inner_text()
        assert error.startswith(f"{field}: '{query.split('=', 1)[1]}' is not ")
        assert page.locator("#query-fix").inner_text().startswith("Fix: ")
