"""The contract suite runs once per (adapter, database)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contract_harness import ADAPTERS, Harness


@pytest.fixture(params=sorted(ADAPTERS))
def harness(request: pytest.FixtureRequest, db_url: str) -> Iterator[Harness]:
    h = ADAPTERS[request.param](db_url)
    yield h
    h.close()
