"""Fixtures of the Dagster layer tests (helpers in dagster_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest
from dagster_support import Runtime, make_runtime, seed_schedule

from gps_dagster.dagster_defs import StaticRuntime, build_definitions


@pytest.fixture
def rt(sqlite_url: str) -> Runtime:
    """The seed pool at Monday 08:00 +07 with the seed schedule applied, gate enforce."""
    runtime = make_runtime(sqlite_url)
    seed_schedule(runtime)
    runtime.clock.advance(5)
    return runtime


@pytest.fixture
def defs(rt: Runtime) -> dg.Definitions:
    return build_definitions(StaticRuntime(rt))


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst
