"""Headless Chromium (Debian ``chromium``) over the live UI: runs page and asset pages, and
no first-visit dialog over them (``nux: {enabled: false}`` in dagster.yaml)."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from e2e_support import Server

from gps_dagster.dagster_defs import names

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="dagster_dev")]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_runs_and_asset_pages_show_the_product(server: Server) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian chromium is missing: run tools/ensure_chromium.sh"
    with tempfile.TemporaryDirectory(prefix="gps-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = context.new_page()
            page.goto(f"{server.dev.url}/runs", wait_until="domcontentloaded")
            page.get_by_text(names.TRANSITION_JOB).first.wait_for(timeout=60_000)
            assert page.get_by_role("dialog").count() == 0  # nux: {enabled: false}
            page.screenshot(path=str(server.artifacts / "runs.png"), full_page=True)
            assert names.TRANSITION_JOB in page.inner_text("body")

            page.goto(
                f"{server.dev.url}/assets/{names.TIMELINE_ASSET}", wait_until="domcontentloaded"
            )
            page.get_by_text("Desired GPUs per schedule").first.wait_for(
                timeout=60_000
            )  # loaded, not a skeleton
            assert page.get_by_role("dialog").count() == 0  # nux: {enabled: false}
            page.screenshot(
                path=str(server.artifacts / "asset-schedule_timeline.png"), full_page=True
            )
            assert names.TIMELINE_ASSET in page.inner_text("body")

            page.goto(f"{server.dev.url}/assets/deploy/md_llama70b", wait_until="domcontentloaded")
            page.get_by_text("status_version").first.wait_for(timeout=60_000)  # observed
            page.screenshot(path=str(server.artifacts / "asset-deploy-a.png"), full_page=True)
            assert "phase" in page.inner_text("body") and "e2e_swap" in page.inner_text("body")
            assert page.get_by_role("dialog").count() == 0  # nux off: no community dialog
        finally:
            context.close()
    assert (server.artifacts / "runs.png").stat().st_size > 10_000
