"""Headless Chromium (Debian ``chromium``) over the live UI: runs page and asset page."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from e2e_support import Server

from gps_dagster.dagster_defs import names

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="dagster_dev")]

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _dismiss_welcome(page: Any) -> None:
    """The UI greets a fresh browser profile with a community dialog: skip it."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=3_000)
    except Exception:  # no dialog this time
        return
    skip.click()


def test_runs_and_asset_pages_show_the_product(server: Server) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian chromium is missing: run tools/ensure_chromium.sh"
    with tempfile.TemporaryDirectory(prefix="gps-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=FLAGS, viewport={"width": 1400, "height": 900}
        )
        try:
            page = context.new_page()
            page.goto(f"{server.dev.url}/runs", wait_until="domcontentloaded")
            page.get_by_text(names.TRANSITION_JOB).first.wait_for(timeout=60_000)
            _dismiss_welcome(page)
            page.screenshot(path=str(server.artifacts / "runs.png"), full_page=True)
            assert names.TRANSITION_JOB in page.inner_text("body")

            page.goto(f"{server.dev.url}/assets/{names.TIMELINE_ASSET}", wait_until="domcontentloaded")
            page.get_by_text("Desired GPUs per schedule").first.wait_for(timeout=60_000)  # loaded, not a skeleton
            _dismiss_welcome(page)
            page.screenshot(path=str(server.artifacts / "asset-schedule_timeline.png"), full_page=True)
            assert names.TIMELINE_ASSET in page.inner_text("body")

            page.goto(f"{server.dev.url}/assets/{names.TARGET_STATUS_ASSET}", wait_until="domcontentloaded")
            page.get_by_text("Phase of every scheduled target").first.wait_for(timeout=60_000)
            page.screenshot(path=str(server.artifacts / "asset-target_status.png"), full_page=True)
            assert names.TARGET_STATUS_ASSET in page.inner_text("body")
        finally:
            context.close()
    assert (server.artifacts / "runs.png").stat().st_size > 10_000
