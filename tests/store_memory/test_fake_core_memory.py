"""The engine's decisions on ``FakeCore`` + ``MemoryStore``: the cases of
``tests/engine/test_fake_core_decisions.py``, their bodies and assertions unchanged, with the
store in memory instead of a SQLite file (``Store.open`` of a memory URL, ``contract.py``).
Nothing touches a database: a case runs in the engine's and the fake core's time alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine import test_fake_core_decisions as decisions
from tests.store_memory.contract import Stores, memory_url


@pytest.fixture
def sqlite_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The cases ask for ``sqlite_url``: here it names a memory store."""
    monkeypatch.setattr(decisions, "Store", Stores())
    return memory_url(tmp_path)


for _name, _case in list(vars(decisions).items()):
    if _name.startswith("test_") and callable(_case):
        globals()[_name] = _case


def test_the_cases_run_on_the_memory_store(sqlite_url: str) -> None:
    w = decisions.fake_world(sqlite_url)
    assert type(w.store).__name__ == "MemoryStore"
    w.run_until(decisions.local("2026-10-19T18:05"))
    assert w.status(decisions.A).phase == "converged"
