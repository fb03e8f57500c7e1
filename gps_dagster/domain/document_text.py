"""Parse-level refusals at the path of the offending value, the rest kept (R-MODEL-7).

R-MODEL-7: every problem at once, each with its path. A nesting too deep, an integer of 5,000
digits, NaN/Infinity, a key given twice are problems of *one value*: the parser leaves a
``Refused`` marker in its place (carrying the reason and fix) and goes on, and validation then
reports the marker at its path beside the document's other field errors
(``documents.settle``). Only what leaves no document behind (a syntax error, a document larger
than ``MAX_NODES``, a nesting deeper than the parsers' own stack) ends the parse — and the last
is still reported at the path where the nesting crossed ``MAX_DEPTH`` (``deep_path``, which reads
the YAML event stream: iterative, and JSON is YAML's flow syntax).

YAML is composed into nodes (PyYAML), then turned into values here, iteratively, one scalar at
a time through the loader's own constructors (YAML 1.2 scalars, ``yaml12``); merge keys (``<<``)
are flattened by the loader and never count as duplicates.
"""

# Decisions embodied here (docs/decisions.md):
# * “Parse-level refusals are values, not the end of the parse”

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from gps_dagster.domain import yaml12
from gps_dagster.domain.yaml12 import DocumentProblem

MAX_DEPTH = 32
"""Deepest nesting of objects/lists a document may have (ours need 6)."""
MAX_NODES = 1_000_000
"""Most values (objects, lists, scalars) one document may hold."""
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


@dataclass(frozen=True, slots=True)
class Refused:
    """A value the parser refused, left in its place so validation goes on around it."""

    reason: str
    fix: str


class Pairs(list[tuple[Any, Any]]):
    """An object's (key, value) pairs as written, duplicates kept (``documents.settle`` says
    which key appears twice, at its path); the first ``merged`` pairs came from YAML merge keys
    and may be overridden."""

    merged: int = 0


def too_deep() -> Refused:
    return Refused("too_deep", f"nest at most {MAX_DEPTH} levels of objects and lists")


def too_long_int(digits: int) -> Refused:
    return Refused(
        "number_too_long", f"an integer has {digits} digits; use at most {yaml12.MAX_INT_DIGITS}"
    )


def json_int(text: str) -> int | Refused:
    digits = len(text.lstrip("+-"))
    return too_long_int(digits) if digits > yaml12.MAX_INT_DIGITS else int(text, 10)


def json_constant(name: str) -> Refused:
    return Refused("invalid_json", f"{name} is not JSON; use a finite number")


def json_pairs(pairs: list[tuple[str, Any]]) -> Pairs:
    return Pairs(pairs)


def yaml_values(text: str) -> Any:
    """The YAML document as values (``Pairs`` for mappings, ``Refused`` where refused)."""
    loader = yaml12.Loader(text)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    if root is None:
        return None
    return _NodeWalk(loader).run(root)


class TooLarge(Exception):
    """More than ``MAX_NODES`` values (an alias bomb): the document is refused whole."""

    def __init__(self, path: list[int | str]) -> None:
        self.path = path
        super().__init__("document_too_large")


class _NodeWalk:
    """Composed YAML nodes -> values, iteratively (aliases are visited each time reached)."""

    def __init__(self, loader: yaml12.Loader) -> None:
        self.loader, self.seen = loader, 0

    def run(self, root: yaml.Node) -> Any:
        out: list[Any] = [None]
        stack: list[tuple[yaml.Node, list[Any], int | str, list[int | str]]] = [(root, out, 0, [])]
        while stack:
            node, parent, slot, path = stack.pop()
            self.seen += 1
            if self.seen > MAX_NODES:
                raise TooLarge(path)
            value = self._value(node, path, stack)
            if isinstance(parent, Pairs):
                parent[int(slot)] = (parent[int(slot)][0], value)
            else:
                parent[int(slot)] = value
        return out[0]

    def _value(self, node: yaml.Node, path: list[int | str], stack: list[Any]) -> Any:
        if len(path) >= MAX_DEPTH and not isinstance(node, yaml.ScalarNode):
            return too_deep()
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
            items: list[Any] = [None] * len(node.value)
            stack.extend((n, items, i, [*path, i]) for i, n in enumerate(node.value))
            return items
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP:
            return self._mapping(node, path, stack)
        return self._scalar(node)

    def _mapping(self, node: yaml.MappingNode, path: list[int | str], stack: list[Any]) -> Any:
        explicit = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        try:
            self.loader.flatten_mapping(node)
        except (yaml.YAMLError, RecursionError) as exc:
            return Refused("invalid_yaml", f"a merge key (<<) is wrong: {_problem(exc)}")
        pairs = Pairs()
        pairs.merged = len(node.value) - explicit
        for key_node, value_node in node.value:
            key = self._scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or isinstance(key, Refused) or not _hashable(key):
                key = Refused("invalid_key", "use a plain string as the key")
            pairs.append((key, None))
            stack.append((value_node, pairs, len(pairs) - 1, [*path, _label(key)]))
        return pairs

    def _scalar(self, node: yaml.Node) -> Any:
        try:
            value = self.loader.construct_object(node, deep=True)
        except DocumentProblem as exc:
            return Refused(exc.error.reason, exc.error.fix)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            return Refused("invalid_yaml", _problem(exc))
        if isinstance(value, float) and not math.isfinite(value):
            return Refused("not_finite", "use a finite number (not .inf or .nan)")
        return value


def deep_path(text: str) -> list[int | str] | None:
    """The path of the first object or list nested deeper than ``MAX_DEPTH`` (None: not found,
    or the text stops parsing before it)."""
    frames: list[list[Any]] = []  # [is_sequence, position, expecting_a_key]
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionEndEvent):
                frames.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            is_key = _advance(frames, event)
            if isinstance(event, yaml.CollectionStartEvent):
                if len(frames) >= MAX_DEPTH:
                    return [f[1] for f in frames]
                frames.append([isinstance(event, yaml.SequenceStartEvent), -1, True])
            elif is_key and frames:
                frames[-1][1] = str(getattr(event, "value", "?"))
    except yaml.YAMLError:
        return None
    return None


def _advance(frames: list[list[Any]], event: yaml.Event) -> bool:
    """Move the innermost frame on to the node ``event`` starts; True when it is a key."""
    if not frames:
        return False
    top = frames[-1]
    if top[0]:
        top[1] += 1
        return False
    if top[2]:
        top[2] = False
        return True
    top[2] = True
    return False


def _label(key: Any) -> int | str:
    return "<key>" if isinstance(key, Refused) else str(key)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _problem(exc: BaseException) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
    return f"{where}{getattr(exc, 'problem', None) or exc}"
