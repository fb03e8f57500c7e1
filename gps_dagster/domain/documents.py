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

from gps_dagster.domain.errors import FieldError, SpecInvalid

M = TypeVar("M", bound=BaseModel)

# pydantic error type -> (reason code, fix template)
_GENERIC_FIXES: dict[str, tuple[str, str]] = {
    "missing": ("missing", "add the field"),
    "extra_forbidden": ("unknown_field", "remove the field or fix its spelling"),
    "literal_error": ("invalid_value", "use one of the allowed values: {expected}"),
    "enum": ("invalid_value", "use one of the allowed values: {expected}"),
    "int_parsing": ("not_an_integer", "use a whole number"),
    "int_type": ("not_an_integer", "use a whole number"),
    "int_from_float": ("not_an_integer", "use a whole number"),
    "greater_than_equal": ("too_small", "use a value >= {ge}"),
    "greater_than": ("too_small", "use a value > {gt}"),
    "bool_parsing": ("not_a_boolean", "use true or false"),
    "bool_type": ("not_a_boolean", "use true or false"),
    "string_type": ("not_a_string", "use a string"),
    "list_type": ("not_a_list", "use a list"),
    "dict_type": ("not_an_object", "use an object (a mapping of fields)"),
    "model_type": ("not_an_object", "use an object (a mapping of fields)"),
    "model_attributes_type": ("not_an_object", "use an object (a mapping of fields)"),
    "datetime_parsing": ("invalid_datetime", "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00"),
    "datetime_type": ("invalid_datetime", "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00"),
    "datetime_from_date_parsing": ("invalid_datetime", "use RFC 3339 with an offset, e.g. 2026-10-21T13:00:00+07:00"),
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
    for err in exc.errors(include_url=False):
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
    """Parse JSON or YAML text (JSON is valid YAML; JSON is tried first for its errors)."""
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecInvalid(
                [FieldError("", "invalid_json", f"line {exc.lineno} column {exc.colno}: {exc.msg}")],
                source=source,
            ) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecInvalid([FieldError("", "invalid_yaml", f"{where}{problem}")], source=source) from exc


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
    try:
        value = model.model_validate(data)
    except ValidationError as exc:
        raise SpecInvalid(field_errors(exc, tags=tags), source=source) from None
    if checks is not None:
        problems = checks(value)
        if problems:
            raise SpecInvalid(problems, source=source)
    return value
