"""The end-to-end tests on the cluster never settle it (docs/testing.md, "End to end or contract").

In production nothing waits for the cluster to be quiet before a pass; the end-to-end files run
the engine's own loop while the cluster moves (``tests/k8s/world.py``). A ``settle()`` there
would hide the intermediate states the product must handle, so this scan refuses one coming
back, and ``K8sWorld`` itself has no ``settle`` (it raises when asked for one).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.k8s.world import K8sWorld

HERE = Path(__file__).parent
END_TO_END = (
    "world.py",
    "test_engine_on_cluster.py",
    "test_ready_by_on_cluster.py",
    "test_deploy_identity.py",
    "test_pool_grace.py",
    "test_reads_never_write.py",
    "test_e2e_intermediate.py",
    "test_quota_failed_create.py",
    "test_engine_through_apf_and_restart.py",
    "test_watch_cache_on_cluster.py",
)
"""Files whose tests drive the engine over time: they use ``new_world`` and never settle."""
CONTRACT = (
    "test_adapter_on_cluster.py",
    "test_verdicts.py",
    "test_rbac.py",
)
"""Unit-sized contract tests: one port call, then the cluster's reaction (a settle may stay)."""

SETTLE = re.compile(r"\bsettle\b(?! import)")
"""A use of ``settle``; importing a helper from its module (``testing.k8s.settle``) is not."""


def code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of code, without comments and docstring prose (a line starting a quote or inside
    a triple-quoted block is prose)."""
    out, in_doc = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        quotes = text.count('"""')
        if in_doc or text.startswith('"""'):
            if quotes == 1:
                in_doc = not in_doc
            continue
        out.append((number, line.split("#", 1)[0]))
    return out


@pytest.mark.parametrize("name", END_TO_END)
def test_an_end_to_end_file_never_settles_the_cluster(name: str) -> None:
    path = HERE / name
    found = [
        f"{name}:{n}: {line.strip()}"
        for n, line in code_lines(path)
        if SETTLE.search(line) and "def settle" not in line
    ]
    assert found == [], "settle() in an end-to-end file: wait for an outcome instead"


def test_every_world_user_is_listed_as_end_to_end() -> None:
    users = {
        p.name
        for p in HERE.glob("test_*.py")
        if "new_world" in p.read_text() and p.name != "test_e2e_no_settle.py"
    }
    assert users <= set(END_TO_END), users - set(END_TO_END)
    assert not set(CONTRACT) & set(END_TO_END)


def test_the_world_refuses_to_settle() -> None:
    with pytest.raises(AttributeError, match="end-to-end"):
        K8sWorld.settle.fget(None)  # type: ignore[attr-defined]


def test_the_scan_sees_a_settle_call(tmp_path: Path) -> None:
    """The scan bites: a settle in code is found, one in a docstring or a comment is not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Docs may say settle()."""\n\n'
        "def f(w):\n"
        '    """Nor settle() here."""\n'
        "    w.tick(30)  # no settle() in a comment\n"
        "    w.cluster.settle()\n"
    )
    found = [n for n, line in code_lines(probe) if SETTLE.search(line)]
    assert found == [6]
