"""Turning user documents (JSON/YAML text, mappings) into frozen models.

Every failure becomes ``SpecInvalid`` with field paths in the user's own
notation (``windows[0].states[1].replicas``), never a pydantic traceback.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gps_dagster.domain import yaml12
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.yaml12 import DocumentProblem

M = TypeVar("M", bound=BaseModel)

MAX_DEPTH = 32
"""Deepest nesting of objects/lists a document may have (ours need 6)."""
MAX_NODES = 1_000_000
"""Most values (objects, lists, scalars) one document may hold."""
_TOO_LONG = 10**yaml12.MAX_INT_DIGITS

_WHOLE = "use a whole number, e.g. 10 (not \"10\" or 10.0)"

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
    "datetime_parsing": ("invalid_datetime", "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00"),
    "datetime_type": ("invalid_datetime", "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00"),
    "datetime_from_date_parsing": ("invalid_datetime", "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00"),
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
        with contextlib.suppress(KeyError, IndexError):  # a template naming what pydantic did not give
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

    Every failure of the parsers is ``SpecInvalid`` (hostile text included: a
    nesting deeper than the parser's stack, a 5,000-digit number, NaN), never
    a ``RecursionError`` or ``ValueError``. YAML is read with YAML 1.2 scalars
    (see ``yaml12``): ``yes``/``no``/``on``/``off`` stay strings, ``010`` is ten.
    """
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        return _parse_json(text, source)
    return _parse_yaml(text, source)


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(
            text, parse_int=_json_int, parse_constant=_json_constant, object_pairs_hook=_json_object
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}: {exc.msg}"
        raise SpecInvalid([FieldError("", "invalid_json", where)], source=source) from None
    except RecursionError:
        raise SpecInvalid([_too_deep()], source=source) from None
    except DocumentProblem as exc:
        raise SpecInvalid([exc.error], source=source) from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml12.load(text)
    except RecursionError:
        raise SpecInvalid([_too_deep()], source=source) from None
    except DocumentProblem as exc:
        raise SpecInvalid([exc.error], source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        error = FieldError("", "invalid_yaml", f"{where}{problem}")
        raise SpecInvalid([error], source=source) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a constructor refusing a !!tag
        raise SpecInvalid([FieldError("", "invalid_yaml", f"{exc}")], source=source) from None


def _json_int(text: str) -> int:
    return yaml12.whole_number(text)


def _json_constant(name: str) -> Any:
    raise DocumentProblem(FieldError("", "invalid_json", f"{name} is not JSON; use a number"))


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentProblem(yaml12.duplicate_key(key))
        out[key] = value
    return out


def _too_deep() -> FieldError:
    return FieldError("", "too_deep", f"nest at most {MAX_DEPTH} levels of objects and lists")


def document_shape_errors(data: Any) -> list[FieldError]:
    """Depth and size limits, checked without recursion before any model sees the data.

    Why: pydantic and our own walks recurse, and a YAML alias bomb (a list of
    aliases of lists of aliases...) is small text but billions of nodes.
    Aliases are counted each time they are reached, as the validator would.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            fix = f"use at most {MAX_NODES:,} values in one document"
            return [FieldError("", "document_too_large", fix)]
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            if isinstance(node, int) and abs(node) >= _TOO_LONG:  # a caller's int, not our text's
                fix = f"use integers of at most {yaml12.MAX_INT_DIGITS} digits"
                return [FieldError("", "number_too_long", fix)]
            continue
        if depth >= MAX_DEPTH:
            return [_too_deep()]
        stack.extend((child, depth + 1) for child in children)
    return []


def build(
    model: type[M],
    data: Any,
    *,
    source: str = "<input>",
    tags: frozenset[str] = frozenset(),
    checks: Callable[[M], list[FieldError]] | None = None,
) -> M:
    """Validate ``data`` into ``model``; run cross-field ``checks``; raise every problem at once."""
    if not isinstance(data, Mapping):
        raise SpecInvalid(
            [FieldError("", "not_an_object", "the document must be a JSON/YAML object")], source=source
        )
    shape = document_shape_errors(data)
    if shape:
        raise SpecInvalid(shape, source=source)
    try:
        value = model.model_validate(data)
    except ValidationError as exc:
        raise SpecInvalid(field_errors(exc, tags=tags), source=source) from None
    if checks is not None:
        problems = checks(value)
        if problems:
            raise SpecInvalid(problems, source=source)
    return value
