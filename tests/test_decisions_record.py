"""``docs/decisions.md`` is a record: numbered entries in order, each with a status, all indexed.

Each entry ends with ``*Status: accepted.*``, ``*Status: accepted, amended by “<title>” (N).*``
or ``*Status: superseded by “<title>” (N).*``; the index at the top lists every entry once,
under its section of the spec. A new decision appended without a status or an index line, or a
"superseded by" that names no later entry, fails here with what to add.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")
HEAD, _, BODY = TEXT.partition("\n## Entries\n")
ENTRIES = re.split(r"\n(?=\d+\. \*\*)", "\n" + BODY)[1:]
STATUS = re.compile(
    r"\*Status: (accepted|accepted, amended by “(?P<a>.+?)” \((?P<an>\d+)\)"
    r"|superseded by “(?P<s>.+?)” \((?P<sn>\d+)\))\.\*\s*$",
    re.S,
)


def number(entry: str) -> int:
    return int(entry.split(".", 1)[0])


def title(entry: str) -> str:
    found = re.match(r"\d+\. \*\*(.+?)\*\*", entry, re.S)
    assert found, entry[:80]
    return re.sub(r"\s+", " ", found.group(1)).strip()


def test_entries_are_numbered_in_order() -> None:
    assert BODY, "docs/decisions.md has no '## Entries' heading"
    assert [number(e) for e in ENTRIES] == list(range(1, len(ENTRIES) + 1))


def test_every_entry_ends_with_its_status() -> None:
    missing = [number(e) for e in ENTRIES if not STATUS.search(e)]
    assert not missing, (
        f"entries without a status line (end each with '*Status: accepted.*'): {missing}"
    )


def test_a_later_entry_amends_or_supersedes() -> None:
    titles = {number(e): title(e) for e in ENTRIES}
    for e in ENTRIES:
        found = STATUS.search(e)
        assert found
        for name, ref in ((found["a"], found["an"]), (found["s"], found["sn"])):
            if ref is None:
                continue
            assert int(ref) > number(e), f"entry {number(e)}: names an earlier entry {ref}"
            assert titles.get(int(ref)) == name, f"entry {number(e)}: ({ref}) is not “{name}”"


def test_the_index_lists_every_entry_once_under_a_section() -> None:
    listed = [int(n) for n in re.findall(r"^\* \((\d+)\) ", HEAD, re.M)]
    twice = sorted({n for n in listed if listed.count(n) > 1})
    absent = sorted(set(range(1, len(ENTRIES) + 1)) - set(listed))
    assert not twice, f"listed twice in the index: {twice}"
    assert not absent, f"entries missing from the index at the top (add '* (N) title'): {absent}"
    sections = re.findall(r"^\*\*.+ \((R-[A-Z]+)(?:, R-[A-Z]+)*\)\*\*$", HEAD, re.M)
    assert len(sections) >= 8, "the index lost its spec sections (headings naming their R- ids)"


PENDING_CITATION: frozenset[str] = frozenset()
LIVES = re.compile(r"\*Lives in:\*(?P<where>.*?)\*Status:", re.S)


def cited(title: str) -> str:
    """The title a module cites: without a "(issue N …)" tag (code cites no issue numbers)
    and without its trailing period or colon."""
    return re.sub(r"\s*\([^()]*\bissue \d[^()]*\)", "", title).rstrip(".:").strip()


def lives_in(entry: str) -> list[str] | None:
    found = LIVES.search(entry)
    if found is None:
        return None
    return re.findall(r"`([^`]+)`", found["where"])


def accepted() -> list[str]:
    return [e for e in ENTRIES if (s := STATUS.search(e)) and s.group(1).startswith("accepted")]


def test_every_accepted_entry_says_where_it_lives() -> None:
    missing = [number(e) for e in accepted() if lives_in(e) is None]
    assert not missing, (
        f"accepted entries without '*Lives in:* `path`' (or 'none (process)') before *Status:*: "
        f"{missing}"
    )


def test_every_named_module_exists_and_cites_the_decision() -> None:
    problems = []
    for e in accepted():
        for path in lives_in(e) or []:
            file = ROOT / path
            if not file.is_file():
                problems.append(f"entry {number(e)}: {path} does not exist")
                continue
            if path in PENDING_CITATION or path.endswith(".json"):
                continue
            src = re.sub(r"\s*\n\s*(?:#|//)?\s*", " ", file.read_text(encoding="utf-8"))
            if f"“{cited(title(e))}”" not in src:
                problems.append(f"entry {number(e)}: {path} does not cite “{cited(title(e))}”")
    assert not problems, "\n".join(problems)
