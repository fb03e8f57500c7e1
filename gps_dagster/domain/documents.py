"""Turning user documents (JSON/YAML text, mappings) into frozen models.

Every failure becomes ``SpecInvalid`` with field paths in the user's own
notation (``windows[0].states[1].replicas``), never a pydantic traceback.
"""

# Decisions embodied here (docs/decisions.md):
# * “Documents are strict and bounded”
# * “Parse-level refusals are values, not the end of the parse”

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gps_dagster.domain import document_text as dt
from gps_dagster.domain import yaml12
from gps_dagster.domain.document_text import MAX_DEPTH, MAX_NODES
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.yaml12 import DocumentProblem

M = TypeVar("M", bound=BaseModel)

_TOO_LONG = 10**yaml12.MAX_INT_DIGITS

_WHOLE = 'use a whole number, e.g. 10 (not "10" or 10.0)'

# pydantic error type -> (reason code, fix template)
_GENERIC_FIXES: dict[str, tuple[str, str]] = {
    "missing": ("missing", "add the field"),
    "extra_forbidden": ("unknown_field", "remove the field or fix its spelling"),
    "literal_error": ("invalid_value", "use one of the allowed values: {expected}"),
    "enum": ("invalid_value", "use one of the allowed values: {expected}"),
    "int_parsing": ("not_an_integer", _WHOLE),
    "int_type": ("not_an_integer", _WHOLE),
    "int_from_float": ("not_an_integer", _WHOLE),
    "greater_than_equal": ("too_small", "use a value >= {ge}"),
    "greater_than": ("too_small", "use a value > {gt}"),
    "less_than_equal": ("too_large", "use a value <= {le}"),
    "less_than": ("too_large", "use a value < {lt}"),
    "float_type": ("not_a_number", "use a number"),
    "float_parsing": ("not_a_number", "use a number"),
    "finite_number": ("not_finite", "use a finite number"),
    "decimal_type": ("not_a_number", "use a number, e.g. 0.95"),
    "decimal_parsing": ("not_a_number", "use a number, e.g. 0.95"),
    "string_too_short": ("too_short", "use at least {min_length} character(s)"),
    "string_too_long": ("too_long", "use at most {max_length} characters"),
    "too_short": ("too_short", "list at least {min_length} item(s)"),
    "too_long": ("too_long", "list at most {max_length} items"),
    "tuple_type": ("not_a_list", "use a list"),
    "bool_parsing": ("not_a_boolean", "use true or false, unquoted"),
    "bool_type": ("not_a_boolean", "use true or false, unquoted"),
    "string_type": ("not_a_string", "use a string"),
    "list_type": ("not_a_list", "use a list"),
    "dict_type": ("not_an_object", "use an object (a mapping of fields)"),
    "model_type": ("not_an_object", "use an object (a mapping of fields)"),
    "model_attributes_type": ("not_an_object", "use an object (a mapping of fields)"),
    "datetime_parsing": (
        "invalid_datetime",
        "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00",
    ),
    "datetime_type": (
        "invalid_datetime",
        "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00",
    ),
    "datetime_from_date_parsing": (
        "invalid_datetime",
        "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00",
    ),
    "date_parsing": ("invalid_date", "use a local date YYYY-MM-DD, e.g. 2026-12-31"),
    "date_type": ("invalid_date", "use a local date YYYY-MM-DD, e.g. 2026-12-31"),
    "date_from_datetime_parsing": ("invalid_date", "use a local date YYYY-MM-DD, e.g. 2026-12-31"),
    "date_from_datetime_inexact": ("invalid_date", "use a local date YYYY-MM-DD, e.g. 2026-12-31"),
    "timezone_aware": ("naive_datetime", "add a UTC offset, e.g. 2026-10-21T13:00:00+07:00"),
    "union_tag_invalid": ("invalid_value", "use one of: {expected_tags}"),
    "union_tag_not_found": ("missing", "add the discriminator field '{discriminator}'"),
}


def format_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """Render a pydantic location as ``windows[0].states[1].replicas``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _strip_tags(loc: tuple[int | str, ...], tags: frozenset[str]) -> tuple[int | str, ...]:
    # Discriminated unions insert the tag value (e.g. "recurring") into the location.
    return tuple(p for p in loc if not (isinstance(p, str) and p in tags))


def field_errors(exc: ValidationError, *, tags: frozenset[str] = frozenset()) -> list[FieldError]:
    """Convert a pydantic ``ValidationError`` into our ``FieldError`` list."""
    out: list[FieldError] = []
    raw = exc.errors(include_url=False)
    item_locs = {
        tuple(e["loc"][:k]) for e in raw for k, part in enumerate(e["loc"]) if isinstance(part, int)
    }
    for err in raw:
        if err["type"] == "too_short" and tuple(err["loc"]) in item_locs:
            continue  # pydantic also calls a list "too short" when its only item is invalid
        loc = _strip_tags(tuple(err["loc"]), tags)
        kind = err["type"]
        ctx: dict[str, Any] = dict(err.get("ctx") or {})
        if kind == "value_error" and isinstance(ctx.get("error"), FieldErrorCarrier):
            carried = ctx["error"].field_error
            path = format_path(loc)
            sub = carried.path
            full = f"{path}.{sub}" if path and sub else (path or sub)
            out.append(FieldError(full, carried.reason, carried.fix))
            continue
        reason, fix = _GENERIC_FIXES.get(kind, (kind, str(err.get("msg", "fix the value"))))
        with contextlib.suppress(
            KeyError, IndexError
        ):  # a template naming what pydantic did not give
            fix = fix.format(**ctx)
        out.append(FieldError(format_path(loc), reason, fix))
    return out


class FieldErrorCarrier(ValueError):
    """Raised inside a validator to report a precise reason code and fix text."""

    def __init__(self, reason: str, fix: str, path: str = "") -> None:
        self.field_error = FieldError(path, reason, fix)
        super().__init__(f"{reason}: {fix}")


def parse_text(text: str, *, source: str = "<input>") -> Any:
    """Parse JSON or YAML text (JSON is valid YAML; JSON is tried first for its errors).

    A value the parser refuses (a nesting deeper than ``MAX_DEPTH``, an integer over
    ``yaml12.MAX_INT_DIGITS`` digits, NaN/Infinity, a key given twice) stays in the result as a
    ``Refused`` marker and objects as ``Pairs``: ``build`` reports each at its path beside the
    other field errors (``document_text``). Text that leaves no document is ``SpecInvalid``
    at once, never a ``RecursionError`` or ``ValueError``. YAML is read with YAML 1.2 scalars
    (see ``yaml12``): ``yes``/``no``/``on``/``off`` stay strings, ``010`` is ten.
    """
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        return _parse_json(text, source)
    return _parse_yaml(text, source)


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(
            text,
            parse_int=dt.json_int,
            parse_constant=dt.json_constant,
            object_pairs_hook=dt.json_pairs,
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}: {exc.msg}"
        raise SpecInvalid([FieldError("", "invalid_json", where)], source=source) from None
    except RecursionError:
        raise SpecInvalid([_too_deep(dt.deep_path(text))], source=source) from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return dt.yaml_values(text)
    except RecursionError:
        raise SpecInvalid([_too_deep(dt.deep_path(text))], source=source) from None
    except dt.TooLarge as exc:
        raise SpecInvalid([_too_large(exc.path)], source=source) from None
    except DocumentProblem as exc:
        raise SpecInvalid([exc.error], source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        error = FieldError("", "invalid_yaml", f"{where}{problem}")
        raise SpecInvalid([error], source=source) from None


def _too_deep(path: Sequence[int | str] | None = None) -> FieldError:
    refused = dt.too_deep()
    return FieldError(format_path(path or ()), refused.reason, refused.fix)


def _too_large(path: Sequence[int | str]) -> FieldError:
    fix = f"use at most {MAX_NODES:,} values in one document (the count ran out here)"
    return FieldError(format_path(path), "document_too_large", fix)


def settle(data: Any) -> tuple[Any, list[FieldError]]:
    """Plain values for validation, and every refused value with its path, in document order.

    Objects given as ``Pairs`` become dicts (a key given twice is reported at its path; the
    first is kept); ``Refused`` markers stay in place and are reported; a caller's own values
    are held to the same limits (depth, integer length, finite numbers), checked iteratively:
    pydantic and our own walks recurse, and a YAML alias bomb is small text but billions of
    nodes (aliases are counted each time they are reached, as the validator would). More than
    ``MAX_NODES`` values is ``SpecInvalid`` at once.
    """
    problems: list[FieldError] = []
    out: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, tuple[int | str, ...]]] = [(data, out, 0, ())]
    seen = 0
    while stack:
        node, parent, slot, path = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise SpecInvalid([_too_large(path)])
        value, children = _settle_one(node, path, problems)
        parent[slot] = value
        stack.extend(reversed(children))
    return out[0], problems


def _settle_one(
    node: Any, path: tuple[int | str, ...], problems: list[FieldError]
) -> tuple[Any, list[tuple[Any, Any, Any, tuple[int | str, ...]]]]:
    refused = _refusal(node, path)
    if refused is not None:
        problems.append(FieldError(format_path(path), refused.reason, refused.fix))
        return refused, []
    if isinstance(node, (dt.Pairs, Mapping)):
        obj: dict[Any, Any] = {}
        explicit: set[Any] = set()
        pairs = list(node) if isinstance(node, dt.Pairs) else list(node.items())
        merged = node.merged if isinstance(node, dt.Pairs) else 0
        kept: list[tuple[Any, Any]] = []
        for index, (key, value) in enumerate(pairs):
            if isinstance(key, dt.Refused):
                problems.append(FieldError(format_path((*path, "<key>")), key.reason, key.fix))
                continue
            if index >= merged:
                if key in explicit:
                    problems.append(_duplicate(path, key))
                    continue
                explicit.add(key)
            kept.append((key, value))
        for key, _ in kept:
            obj[key] = None  # the document's key order, whatever order the values settle in
        return obj, [(value, obj, key, (*path, str(key))) for key, value in kept]
    if isinstance(node, (list, tuple)):
        items: list[Any] = [None] * len(node)
        return items, [(child, items, i, (*path, i)) for i, child in enumerate(node)]
    return node, []


def _refusal(node: Any, path: tuple[int | str, ...]) -> dt.Refused | None:
    if isinstance(node, dt.Refused):
        return node
    if isinstance(node, (dt.Pairs, Mapping, list, tuple)):
        return dt.too_deep() if len(path) >= MAX_DEPTH else None
    if isinstance(node, int) and not isinstance(node, bool) and abs(node) >= _TOO_LONG:
        return dt.too_long_int(_digits(abs(node)))
    if isinstance(node, float) and not math.isfinite(node):
        return dt.Refused("not_finite", "use a finite number")
    return None


def _digits(n: int) -> int:
    """Decimal digits of ``n``; beyond ~4,000 an estimate (Python refuses ``str()`` there)."""
    return len(str(n)) if n.bit_length() < 13_000 else int(n.bit_length() * math.log10(2)) + 1


def _duplicate(path: tuple[int | str, ...], key: Any) -> FieldError:
    error = yaml12.duplicate_key(key)
    return FieldError(format_path((*path, str(key))), error.reason, error.fix)


def _under(path: str, refused: Sequence[str]) -> bool:
    """True when a validation error at ``path`` is about a value refused at parse level."""
    return any(path == r or path.startswith((f"{r}.", f"{r}[")) or not r for r in refused)


def build(
    model: type[M],
    data: Any,
    *,
    source: str = "<input>",
    tags: frozenset[str] = frozenset(),
    checks: Callable[[M], list[FieldError]] | None = None,
) -> M:
    """Validate ``data`` into ``model``; run cross-field ``checks``; raise every problem at once.

    Values refused at parse level (``settle``) are reported at their paths together with the
    field errors of the rest of the document; cross-field checks run on a valid model only.
    """
    try:
        data, refused = settle(data)
    except SpecInvalid as exc:
        raise SpecInvalid(list(exc.errors), source=source) from None
    if not isinstance(data, Mapping):
        fix = "the document must be a JSON/YAML object"
        raise SpecInvalid([*refused, FieldError("", "not_an_object", fix)], source=source)
    try:
        value = model.model_validate(data)
    except ValidationError as exc:
        paths = [e.path for e in refused]
        rest = [e for e in field_errors(exc, tags=tags) if not _under(e.path, paths)]
        raise SpecInvalid([*refused, *rest], source=source) from None
    if refused:
        raise SpecInvalid(refused, source=source)
    if checks is not None:
        problems = checks(value)
        if problems:
            raise SpecInvalid(problems, source=source)
    return value
