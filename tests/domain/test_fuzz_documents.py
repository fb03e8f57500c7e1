"""Fuzzing every parser of user documents: only ``SpecInvalid`` or a valid model comes out.

Three kinds of input: random JSON-like trees (huge and non-finite numbers,
odd strings), valid example documents with one value replaced by such a tree
(so the deep validators see hostile values in the right places), and raw
text (random JSON/YAML renderings, deep nesting, YAML tags and anchors). A
schedule that is accepted must also evaluate anywhere in its instant range.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.evaluator import current_interval, intervals, next_boundary
from gps_dagster.domain.gps.bindings import load_binding
from gps_dagster.domain.gps.reservations import load_reservation_spec, parse_reservation_spec
from gps_dagster.domain.pool import load_pool, parse_pool
from gps_dagster.domain.schedules import load_schedule, parse_schedule
from gps_dagster.domain.spec import Schedule

EXAMPLES = Path(__file__).parents[2] / "examples"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LOADERS: dict[str, Callable[[Any], object]] = {
    "schedule": load_schedule,
    "pool": load_pool,
    "reservation": load_reservation_spec,
    "binding": load_binding,
}
PARSERS: dict[str, Callable[[str], object]] = {
    "schedule": parse_schedule,
    "pool": parse_pool,
    "reservation": parse_reservation_spec,
}
BASES: dict[str, list[Any]] = {
    "schedule": [
        json.loads((EXAMPLES / n).read_text())
        for n in ("seed-schedule.json", "scenario2-schedule.json", "gpu42-schedule.json")
    ],
    "pool": [
        yaml.safe_load((EXAMPLES / n).read_text())
        for n in ("seed-pool-10.yaml", "gpu42-pool.yaml", "scenario2-reservations-pool.yaml")
    ],
    "reservation": [yaml.safe_load((EXAMPLES / "gpu42-reservation.yaml").read_text())],
    "binding": [
        {"mode": "exclusive", "gpus_per_replica": 8, "reservations": ["r1"]},
        {"mode": "time_sliced", "reservation": "r1", "memory_mib": 1024},
    ],
}

odd_strings = st.one_of(
    st.text(max_size=30),
    st.sampled_from([4300, 5000]).map(lambda digits: "9" * digits),
    st.sampled_from(
        [
            "",
            " ",
            "\n",
            "yes",
            "no",
            "on",
            "0o17",
            "010",
            "1:30",
            "1e400",
            "NaN",
            "-0",
            "８",
            "²",
            "9999999999d",
            "0001-01-01T00:00:00+07:00",
            "9999-12-31T23:59:59Z",
            "2026-10-21T13:00:00",
            "America",
            "A" * 300,
            "../../etc/passwd",
            "Asia/Ho_Chi_Minh\n",
            "0 8 * * 1-5 2026",
            "* * * * *",
            "@yearly",
            "0 0 29 2 *",
            "*/0 * * * *",
            "\x00",
            "\u2028",
            "\x1b[31m",
            "running",
            "stopped",
            "recurring",
            "one_shot",
            "exclusive",
            "time_sliced",
        ]
    ),
)
printable_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
huge_ints = st.sampled_from([4300, 5000]).map(lambda digits: -(10**digits))  # str() refuses them


def _trees(numbers: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(st.none(), numbers, odd_strings),
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(odd_strings, children, max_size=4)
        ),
        max_leaves=12,
    )


trees = _trees(st.one_of(printable_numbers, huge_ints))
printable_trees = _trees(printable_numbers)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


def replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(doc)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


@st.composite
def mutated(draw: st.DrawFn, kind: str) -> Any:
    base = draw(st.sampled_from(BASES[kind]))
    doc = base
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        doc = replaced(doc, draw(st.sampled_from(paths(doc))), draw(trees))
    return doc


def deep(depth: int) -> str:
    return '{"name": ' + "[" * depth + "]" * depth + "}"


texts = st.one_of(
    printable_trees.map(lambda t: json.dumps(t, allow_nan=True)),
    printable_trees.map(lambda t: yaml.safe_dump(t, allow_unicode=True)),
    st.sampled_from([4300, 5000]).map(lambda digits: '{"name": ' + "9" * digits + "}"),
    st.text(max_size=200),
    st.integers(min_value=1, max_value=3000).map(deep),
    st.integers(min_value=1, max_value=100_000).map(lambda n: "[" * n),
    st.sampled_from(
        [
            "name: !!python/object/apply:os.system [echo]\n",
            "a: &a [*a]\n",
            "a: !!binary '@@'\n",
            "a: !!timestamp 2026-13-45\n",
            "a: !!int 0xZZ\n",
            "a: !!float nan\n",
            "? [a, b]\n: c\n",
            "---\na: 1\n---\nb: 2\n",
            '{"a": 1, "a": 2}',
            '{"a": Infinity}',
            "name: [" + ", ".join(["*a"] * 50) + "]\n",
        ]
    ),
)

ANCHORS = [
    datetime(1970, 1, 2, tzinfo=UTC),
    datetime(2026, 10, 19, tzinfo=UTC),
    datetime(8999, 6, 1, tzinfo=UTC),
]


def only_spec_invalid(fn: Callable[[Any], object], value: Any) -> object | None:
    try:
        return fn(value)
    except SpecInvalid as exc:
        assert exc.errors and all(e.reason and e.fix and "\n" not in str(e) for e in exc.errors)
        return None


def evaluates(schedule: Schedule) -> None:
    for start in ANCHORS:
        end = start + timedelta(days=7)
        assert set(intervals(schedule, start, end)) == set(schedule.target_ids)
        for target in schedule.target_ids:
            assert current_interval(schedule, target, start).start <= start
        next_boundary(schedule, start)


@FUZZ
@given(st.sampled_from(sorted(LOADERS)), trees)
def test_random_trees_give_spec_invalid_or_a_model(kind: str, tree: Any) -> None:
    only_spec_invalid(LOADERS[kind], tree)


@FUZZ
@given(st.data())
def test_examples_with_hostile_values_give_spec_invalid_or_a_model(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(sorted(LOADERS)))
    result = only_spec_invalid(LOADERS[kind], data.draw(mutated(kind)))
    if isinstance(result, Schedule):
        evaluates(result)


@FUZZ
@given(st.sampled_from(sorted(PARSERS)), texts)
def test_hostile_text_gives_spec_invalid_or_a_model(kind: str, text: str) -> None:
    only_spec_invalid(PARSERS[kind], text)
