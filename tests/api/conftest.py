from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from api_support import Api, make_api


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    built = make_api(sqlite_url)
    yield built
    built.client.close()
    built.services.store.engine.dispose()
