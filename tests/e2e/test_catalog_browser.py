"""What a Dagster user expects and finds (issue 20 §3), in headless Chromium over ``dagster dev``.

* the Catalog's Status column shows each deploy's last change (a runless materialization per
  status change), not "–";
* the asset graph has real edges: ``schedule/e2e_swap`` → both deploys;
* turning ``gps_capacity_wait`` off with the UI's own toggle turns the schedule's
  ``automation`` check yellow (WARN) with the reason and the fix; on again, it passes;
* the Materialize dialog of the hourly timeline carries no run-coordinator warning.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from e2e_support import Server

from gps_dagster.dagster_defs import names
from gps_dagster.demo.devserver import graphql

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
CHECK = """
query Check($path: [String!]!) {
  assetNodes(assetKeys: [{path: $path}]) {
    assetChecksOrError { ... on AssetChecks { checks { name
      executionForLatestMaterialization { status evaluation { severity description } } } } }
  }
}
"""
REPOS = (
    "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
)
SENSOR = """
query Sensor($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) { ... on Sensor { sensorState { status } } }
}
"""
EDGES = "{ assetNodes { assetKey { path } dependencyKeys { path } } }"


@contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian chromium is missing: run tools/ensure_chromium.sh"
    with tempfile.TemporaryDirectory(prefix="gps-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=FLAGS,
            viewport={"width": 1500, "height": 1000},
        )
        try:
            yield context.new_page()
        finally:
            context.close()


def _automation(server: Server) -> dict[str, Any] | None:
    nodes = graphql(server.dev.url, CHECK, {"path": ["schedule", "e2e_swap"]})["assetNodes"]
    for check in nodes[0]["assetChecksOrError"]["checks"]:
        if check["name"] == names.CHECK_AUTOMATION:
            return check.get("executionForLatestMaterialization")  # type: ignore[no-any-return]
    raise AssertionError("no automation check on schedule/e2e_swap")


def _wait(what: str, ok: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ok()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


def _sensor_status(server: Server, name: str) -> str:
    [repo] = graphql(server.dev.url, REPOS)["repositoriesOrError"]["nodes"]
    selector = {
        "repositoryLocationName": repo["location"]["name"],
        "repositoryName": repo["name"],
        "sensorName": name,
    }
    answer = graphql(server.dev.url, SENSOR, {"selector": selector})["sensorOrError"]
    return str(answer["sensorState"]["status"])


def _toggle(page: Any, server: Server, name: str) -> None:
    """The switch on the sensor's own page (Automation → the sensor), as an operator does."""
    [repo] = graphql(server.dev.url, REPOS)["repositoriesOrError"]["nodes"]
    page.goto(
        f"{server.dev.url}/locations/{repo['location']['name']}/sensors/{name}",
        wait_until="domcontentloaded",
    )
    switch = page.locator('input[type="checkbox"]')
    switch.first.wait_for(state="attached", timeout=90_000)
    page.wait_for_timeout(2_000)  # the sensor's state loaded behind the switch
    assert switch.count() == 1, "the sensor page has one switch"
    was = switch.first.is_checked()
    page.locator('label:has(input[type="checkbox"])').first.click()
    _wait("the switch moved", lambda: switch.first.is_checked() != was, 60)


def test_the_catalog_shows_each_deploys_last_change_and_the_graph_has_edges(server: Server) -> None:
    edges = {
        tuple(n["assetKey"]["path"]): [tuple(d["path"]) for d in n["dependencyKeys"]]
        for n in graphql(server.dev.url, EDGES)["assetNodes"]
    }
    assert edges[("deploy", "md_llama70b")] == [("schedule", "e2e_swap")]
    assert edges[("deploy", "md_qwen32b")] == [("schedule", "e2e_swap")]
    with browser() as page:
        page.goto(f"{server.dev.url}/assets", wait_until="domcontentloaded")
        page.get_by_text("deploy / md_llama70b").first.wait_for(timeout=90_000)
        # both deploy rows say "Materialized <when>", not "–" (Dagster's CSP forbids a string
        # predicate in the page: poll from here)
        _wait(
            "both deploys' status", lambda: page.inner_text("body").count("Materialized") >= 2, 90
        )
        page.screenshot(path=str(server.artifacts / "catalog.png"), full_page=True)
        body = page.inner_text("body")
        assert "schedule / e2e_swap" in body
        page.goto(
            f"{server.dev.url}/assets/deploy/md_llama70b?view=lineage",
            wait_until="domcontentloaded",
        )
        page.get_by_text("e2e_swap").first.wait_for(timeout=60_000)  # the upstream schedule
        page.wait_for_timeout(3_000)
        page.screenshot(path=str(server.artifacts / "lineage-md_llama70b.png"), full_page=True)


def test_turning_capacity_wait_off_in_the_ui_turns_the_schedule_yellow(server: Server) -> None:
    name = names.CAPACITY_WAIT_SENSOR
    assert _sensor_status(server, name) == "RUNNING"
    with browser() as page:
        try:
            _toggle(page, server, name)
            _wait("the sensor stopped", lambda: _sensor_status(server, name) == "STOPPED", 60)

            def warned() -> Any:
                run = _automation(server)
                return run if run and run["status"] == "FAILED" else None

            result = _wait("a WARN automation check", warned)
            assert result["evaluation"]["severity"] == "WARN"
            assert result["evaluation"]["description"].startswith(f"{name} is stopped")
            page.goto(
                f"{server.dev.url}/assets/schedule/e2e_swap?view=checks",
                wait_until="domcontentloaded",
            )
            page.get_by_text(f"{name} is stopped").first.wait_for(timeout=60_000)
            page.screenshot(path=str(server.artifacts / "automation-warn.png"), full_page=True)
        finally:
            if _sensor_status(server, name) != "RUNNING":
                _toggle(page, server, name)
        _wait("the sensor on again", lambda: _sensor_status(server, name) == "RUNNING", 60)
        _wait(
            "a passing automation check",
            lambda: (_automation(server) or {}).get("status") == "SUCCEEDED",
        )


def test_the_materialize_dialog_has_no_run_coordinator_warning(server: Server) -> None:
    with browser() as page:
        page.goto(f"{server.dev.url}/assets/{names.TIMELINE_ASSET}", wait_until="domcontentloaded")
        button = page.get_by_role("button", name="Materialize", exact=False).first
        button.wait_for(timeout=90_000)
        page.wait_for_timeout(2_000)  # the definition loaded: the button opens the dialog
        button.click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_text("Partition selection").first.wait_for(timeout=60_000)
        page.wait_for_timeout(2_000)  # the instance query behind the warnings answered
        page.screenshot(path=str(server.artifacts / "materialize-dialog.png"), full_page=True)
        text = dialog.inner_text()
        assert "Launch runs to materialize" in text
        assert "run coordinator" not in text and "DefaultRunLauncher" not in text, text
