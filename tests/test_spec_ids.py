"""Requirement ids resolve: every ``R-…`` the code and tests cite is listed in ``docs/spec.md``.

The appendix of ``docs/spec.md`` is a table, one row per id: the rule in one line and the
function that embodies it (``module::function``; a method as ``Class.method``). These tests
read that table and check that it is complete for what the repository cites, that no id is
listed twice, and that every named function exists (import the module, ``getattr`` the path),
so a rename or a move that forgets the record fails here.
"""

from __future__ import annotations

import importlib
import re
from functools import reduce
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "spec.md"
ID = re.compile(r"\bR-[A-Z0-9]+(?:-[A-Z0-9]+)*")
REF = re.compile(r"`([A-Za-z_][\w.]*)::([A-Za-z_][\w.]*)`")
NOT_BUILT = "not built"
SECTION = "section"


def rows(text: str) -> list[tuple[str, str, str]]:
    """(id, rule, lives in) of each table row whose first cell is an id."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| R-") and len(cells) == 3:
            out.append((cells[0], cells[1], cells[2]))
    return out


def cited(*dirs: str) -> dict[str, set[str]]:
    """Each id cited in the Python files under ``dirs`` -> the files citing it."""
    found: dict[str, set[str]] = {}
    for d in dirs:
        for path in sorted((ROOT / d).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            for rid in ID.findall(path.read_text(encoding="utf-8")):
                found.setdefault(rid, set()).add(str(path.relative_to(ROOT)))
    return found


def resolve(module: str, qualname: str) -> object:
    """The object ``module::qualname`` names (``gps_dagster.`` implied for short paths)."""
    if not module.startswith("gps_dagster"):
        module = f"gps_dagster.{module}"
    return reduce(getattr, qualname.split("."), importlib.import_module(module))


TABLE = rows(SPEC.read_text(encoding="utf-8"))


def test_the_table_is_there() -> None:
    assert len(TABLE) >= 80, "docs/spec.md lost its appendix of requirement ids"


def test_no_id_is_listed_twice() -> None:
    ids = [rid for rid, _, _ in TABLE]
    twice = sorted({rid for rid in ids if ids.count(rid) > 1})
    assert not twice, f"listed more than once in docs/spec.md: {twice}"


def test_every_cited_id_is_listed() -> None:
    listed = {rid for rid, _, _ in TABLE}
    missing = {
        rid: sorted(where)
        for rid, where in cited("gps_dagster", "tests").items()
        if rid not in listed
    }
    assert not missing, f"cited but not listed in docs/spec.md's appendix: {missing}"


def test_every_row_says_what_and_where() -> None:
    for rid, rule, lives in TABLE:
        assert ID.fullmatch(rid), rid
        assert len(rule) > 10, f"{rid}: no rule text"
        if lives == SECTION:
            assert not re.search(r"-\d+$", rid), f"{rid}: an item is not a section"
        elif lives.startswith(NOT_BUILT):
            assert rid not in cited("gps_dagster"), f"{rid} is cited by code yet 'not built'"
        else:
            assert REF.match(lives), f"{rid}: 'lives in' must start with `module::function`"


@pytest.mark.parametrize(
    ("rid", "ref"), [(rid, ref) for rid, _, lives in TABLE for ref in REF.findall(lives)]
)
def test_lives_in_resolves(rid: str, ref: tuple[str, str]) -> None:
    module, qualname = ref
    try:
        obj = resolve(module, qualname)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{rid}: `{module}::{qualname}` does not resolve: {exc}")
    assert callable(obj), f"{rid}: `{module}::{qualname}` is not a function or class"


def test_a_wrong_reference_fails() -> None:
    """The resolver is not vacuous: a name that does not exist raises."""
    with pytest.raises(AttributeError):
        resolve("engine.failures", "no_such_rule")
    with pytest.raises(ImportError):
        resolve("engine.no_such_module", "judge")
