"""A YAML loader with YAML 1.2 core scalars, unique keys and bounded numbers.

Why not ``yaml.safe_load``: PyYAML resolves plain scalars by YAML 1.1, so
``allow_downtime: yes`` is a boolean, ``priority: 010`` is eight (octal),
``duration: 1:30`` is ninety (sexagesimal) and an unquoted RFC 3339 instant
becomes a ``datetime`` behind the schema's back. Documents here are strict:
only ``true``/``false`` are booleans, integers are decimal (``0o``/``0x``
explicit), instants stay text for the schema to parse, a key given twice is
an error (the last one would silently win), and an integer literal longer
than ``MAX_INT_DIGITS`` is refused before ``int()`` meets it.
"""

# Decisions embodied here (docs/decisions.md):
# * “Documents are strict and bounded”

from __future__ import annotations

import re
from typing import Any

import yaml

from gps_dagster.domain.errors import FieldError

__all__ = ["MAX_INT_DIGITS", "DocumentProblem", "Loader", "duplicate_key", "load", "whole_number"]

MAX_INT_DIGITS = 30
"""Longest integer literal accepted (no field needs more than 19 digits)."""

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")


class DocumentProblem(Exception):
    """A problem found while parsing text, carried out of the parser as a ``FieldError``."""

    def __init__(self, error: FieldError) -> None:
        self.error = error
        super().__init__(str(error))


def whole_number(text: str) -> int:
    """A decimal integer literal (JSON or YAML) as ``int``; too many digits is a document error."""
    digits = text.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise DocumentProblem(
            FieldError(
                "",
                "number_too_long",
                f"an integer has {len(digits)} digits; use at most {MAX_INT_DIGITS}",
            )
        )
    return int(text, 10)


def duplicate_key(key: object) -> FieldError:
    return FieldError(
        "", "duplicate_key", f"key {str(key)[:80]!r} appears twice in one object; keep one"
    )


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core implicit types (see the module docstring)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if (
                not isinstance(key_node, yaml.ScalarNode)
                or key_node.tag == "tag:yaml.org,2002:merge"
            ):
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise DocumentProblem(duplicate_key(key_node.value))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _construct_bool(loader: _Loader, node: yaml.ScalarNode) -> bool:
    value = str(loader.construct_scalar(node)).lower()
    if value not in ("true", "false"):
        raise ValueError(f"{value[:40]!r} is not a boolean; use true or false")
    return value == "true"


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    value = str(loader.construct_scalar(node))
    if value[:2] in ("0o", "0x"):
        if len(value) > MAX_INT_DIGITS + 2:
            return whole_number(value)  # raises: too many digits
        return int(value[2:], 8 if value[1] == "o" else 16)
    return whole_number(value)


def _install() -> None:
    kept = {
        first: [(tag, rx) for tag, rx in resolvers if tag in ("tag:yaml.org,2002:merge",)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    _Loader.yaml_implicit_resolvers = {k: v for k, v in kept.items() if v}
    _Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
    _Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
    _Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    _Loader.add_implicit_resolver("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""])
    _Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
    _Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


_install()


Loader = _Loader
"""The loader (``document_text`` composes with it and constructs one value at a time)."""


def load(text: str) -> Any:
    """Parse one YAML document with YAML 1.2 core scalars and unique keys."""
    return yaml.load(text, Loader=_Loader)
