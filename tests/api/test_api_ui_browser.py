"""Headless Chromium (Debian ``chromium``, driven by playwright) over the timeline page.

* the seed week shows the Wednesday maint-wed override, and a click at Wed 14:00 +07 shows
  A stopped by maint-wed, B running;
* the reservation slider of the gpu42 schedule flips the verdict at the 136,582 MiB budget.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from api_support import ADMIN, ROOT, make_api, seed
from live_server import serving

pytestmark = [pytest.mark.slow]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SEED_POOL = ROOT / "examples" / "seed-pool-10.yaml"
GPU42_POOL = ROOT / "examples" / "gpu42-pool.yaml"
MONDAY = datetime.fromisoformat("2026-10-19T09:00:00+07:00")


@contextmanager
def browser_page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian chromium is missing: run tools/ensure_chromium.sh"
    with tempfile.TemporaryDirectory(prefix="gps-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=FLAGS,
            viewport={"width": 1500, "height": 1100},
        )
        try:
            yield context.new_page()
        finally:
            context.close()


def login(page: Any, url: str, token: str, target: str) -> None:
    page.goto(f"{url}/ui/login?next={target}")
    page.fill("#token", token)
    page.click("#login")
    page.wait_for_selector("body[data-loaded]", timeout=90_000)


def click_at(page: Any, wall: str) -> None:
    """A real mouse click on the chart at local wall time ``wall`` (in the GPU panel)."""
    x = page.evaluate(f"window.gpsTimeline.clientX({json.dumps(wall)})")
    box = page.locator("#chart").bounding_box()
    page.mouse.click(x, box["y"] + box["height"] * 0.85)


def cell(page: Any, target: str, column: str) -> str:
    return page.locator(f'#instant tr[data-target="{target}"] td.{column}').inner_text()


def test_the_seed_week_shows_maint_wed_and_the_instant_table(
    sqlite_url: str, tmp_path: Path
) -> None:
    api = make_api(sqlite_url, pool=SEED_POOL, start=MONDAY)
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/gpu-pool-h100-shared?week=2026-10-19")
        assert (
            page.locator("#range")
            .inner_text()
            .startswith("2026-10-19 00:00:00 → 2026-10-26 00:00:00")
        )
        chart = page.locator("#chart").inner_text()
        assert (
            "maint-wed · one_shot · p100" in chart and "business-hours · recurring · p10" in chart
        )
        click_at(page, "2026-10-21 14:00:00")
        page.wait_for_function(
            "document.getElementById('instant-label').textContent.startsWith('2026-10-21 14:00')"
        )
        assert (cell(page, "md-llama70b", "desired"), cell(page, "md-llama70b", "decided-by")) == (
            "stopped",
            "maint-wed",
        )
        assert cell(page, "md-qwen32b", "desired") == "running"
        assert "overrides business-hours" in cell(page, "md-llama70b", "note")
        page.screenshot(path=str(tmp_path / "seed-week.png"), full_page=True)
        click_at(page, "2026-10-21 10:00:00")
        page.wait_for_function(
            "document.getElementById('instant-label').textContent.startsWith('2026-10-21 10:00')"
        )
        assert (cell(page, "md-llama70b", "desired"), cell(page, "md-llama70b", "decided-by")) == (
            "running",
            "business-hours",
        )
        page.click("#next-week")
        page.wait_for_selector('body[data-loaded="2026-10-26T00:00:00+07:00"]', timeout=90_000)
        assert (
            "maint-wed · one_shot · p100" in page.locator("#chart").inner_text()
        )  # a band, no occurrence


def test_the_reservation_slider_flips_the_verdict_at_the_budget(
    sqlite_url: str, tmp_path: Path
) -> None:
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
        box.wait_for(timeout=90_000)
        assert "budget 136,582 MiB = 143,771 MiB × 0.95" in box.inner_text()
        click_at(page, "2026-10-19 10:00:00")  # business hours: chat + embed run
        box.locator("select.member").select_option("md-vision-chat")
        slider = box.locator("input.slider")
        slider.evaluate("(el) => { el.value = 112581; el.dispatchEvent(new Event('input')); }")
        page.wait_for_selector('#rsv-rsv-gpu42-shared[data-total="136581"]')
        assert box.get_attribute("data-verdict") == "admitted"
        slider.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_selector('#rsv-rsv-gpu42-shared[data-total="136582"]')
        assert box.get_attribute("data-verdict") == "admitted"
        page.keyboard.press("ArrowRight")
        page.wait_for_selector('#rsv-rsv-gpu42-shared[data-total="136583"]')
        assert box.get_attribute("data-verdict") == "refused"
        assert "reservation_overcommitted" in box.locator(".verdict").inner_text()
        page.screenshot(path=str(tmp_path / "gpu42-reservation.png"), full_page=True)
    shutil.copy(tmp_path / "gpu42-reservation.png", "/tmp/gpu42-reservation.png")


def test_a_holiday_week_marks_the_skipped_days_and_b_keeps_the_gpus(
    sqlite_url: str, tmp_path: Path
) -> None:
    """R-NEXT-2: Vietnam's National Day (2026-09-02) is drawn as a skipped occurrence of
    business-hours, its day is shaded, and the instant table says why A stays stopped."""
    doc = seed()
    doc["windows"][0]["skip"] = {"holidays": {"country": "VN", "categories": ["public"]}}
    api = make_api(
        sqlite_url, pool=SEED_POOL, start=datetime.fromisoformat("2026-08-31T09:00:00+07:00")
    )
    assert api.call("admin", "POST", ADMIN, json=doc).status_code == 201
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/gpu-pool-h100-shared?week=2026-08-31")
        skipped = page.evaluate(
            "document.getElementById('chart').data.filter((t) => t.meta === 'skipped')"
            ".flatMap((t) => t.text)"
        )
        assert skipped == [
            "business-hours skipped: Day off (substituted from 08/22/2026)",
            "business-hours skipped: National Day",
            "business-hours skipped: National Day",
        ]
        shaded = page.evaluate(
            "document.getElementById('chart').layout.shapes.filter((s) => (s.name || '')"
            ".startsWith('skipped ')).map((s) => s.name)"
        )
        assert shaded == ["skipped 2026-08-31", "skipped 2026-09-01", "skipped 2026-09-02"]
        click_at(page, "2026-09-02 10:00:00")
        page.wait_for_function(
            "document.getElementById('instant-label').textContent.startsWith('2026-09-02 10:00')"
        )
        assert (cell(page, "md-llama70b", "desired"), cell(page, "md-llama70b", "decided-by")) == (
            "stopped",
            "default",
        )
        assert "business-hours skipped: National Day" in cell(page, "md-llama70b", "note")
        assert cell(page, "md-qwen32b", "desired") == "running"
        page.screenshot(path=str(tmp_path / "holiday-week.png"), full_page=True)


def test_a_ready_by_week_draws_each_early_start_with_its_reason(sqlite_url: str) -> None:
    """R-NEXT-1: the page draws the lead (default 300 s + 60 s before any history) of A and B
    before every 08:00 of the seed week, each bar with the reason and the figures."""
    doc = seed()
    doc["targets"][0]["ready_by"] = True
    api = make_api(sqlite_url, pool=SEED_POOL, start=MONDAY)
    assert api.call("admin", "POST", ADMIN, json=doc).status_code == 201
    with serving(api.client.app) as url, browser_page() as page:
        login(page, url, api.tokens["admin"], "/ui/schedules/gpu-pool-h100-shared?week=2026-10-19")
        leads = page.evaluate(
            "document.getElementById('chart').data.filter((t) => t.meta === 'ready_by')"
            ".flatMap((t) => t.text)"
        )
        assert len(leads) == 10  # Mon-Fri 08:00, A and B each
        assert leads[0].startswith("md-llama70b: early start 2026-10-19 07:54:00 (lead 360 s)")
        assert "md-qwen32b stop p90 60 s (default, 0 obs.)" in leads[0]
