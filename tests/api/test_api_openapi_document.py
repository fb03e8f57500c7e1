"""The OpenAPI document describes inputs as the server validates them (issue 21 item 17).

A regression to a loose schema fails here: a body that is any object again (``dict[str, Any]``
derived as ``additionalProperties: true``), a path parameter without its pattern, If-Match
optional on the tenant surface, an error status without the problem body, or an ``x-reasons``
entry that is no reason the code can answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from api_support import ROOT, Api

PACKAGE = ROOT / "gps_dagster"
OWN = PACKAGE / "api" / "openapi.py"


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield path, method, op


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def loose(doc: dict[str, Any], schema: Any, seen: set[str], where: str) -> Iterator[str]:
    """Every place under ``schema`` that admits an arbitrary object."""
    if isinstance(schema, list):
        for i, s in enumerate(schema):
            yield from loose(doc, s, seen, f"{where}[{i}]")
        return
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name not in seen:
            seen.add(name)
            yield from loose(doc, doc["components"]["schemas"][name], seen, name)
        return
    if schema.get("type") == "object" and schema.get("additionalProperties", True) is not False:
        yield where
    for key in ("properties",):
        for name, sub in schema.get(key, {}).items():
            yield from loose(doc, sub, seen, f"{where}.{name}")
    for key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties"):
        if key in schema:
            yield from loose(doc, schema[key], seen, f"{where}.{key}")


@pytest.fixture
def doc(api: Api) -> dict[str, Any]:
    return api.client.get("/openapi.json").json()


def test_every_request_body_is_a_typed_closed_schema(doc: dict[str, Any]) -> None:
    bodies = 0
    for path, method, op in operations(doc):
        content = op.get("requestBody", {}).get("content", {})
        for media, entry in content.items():
            bodies += 1
            assert media == "application/json", (path, method, media)
            assert "$ref" in entry["schema"], f"{method} {path}: the body schema is not a named type"
            found = list(loose(doc, entry["schema"], set(), f"{method} {path}"))
            assert not found, f"{method} {path}: loose objects (additionalProperties not false) at {found}"
    assert bodies >= 12  # create, replace, both dry-runs ×2 surfaces, admission ×2, reservation, repin


def test_schedule_documents_carry_the_domain_bounds(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    schedule = schemas["ScheduleDocument"]
    assert set(schedule["required"]) == {"name", "timezone", "targets"}
    assert schedule["properties"]["windows"]["maxItems"] == 200
    assert schedule["properties"]["mode"]["enum"] == ["enforce", "observe"]
    recurring = schemas["RecurringWindow"]["properties"]
    assert recurring["priority"]["maximum"] == 1_000_000_000 and recurring["kind"]["const"] == "recurring"
    assert re.fullmatch(recurring["duration"]["pattern"].strip("^$"), "1d2h")
    assert not re.fullmatch(recurring["duration"]["pattern"].strip("^$"), "10 hours")
    name = re.compile(schedule["properties"]["name"]["pattern"].removesuffix("$") + r"\Z")
    assert name.match("gpu-pool-h100-shared") and not name.match("gpu-") and not name.match("Gpu")
    assert schemas["StateDocument"]["properties"]["replicas"]["anyOf"][0]["minimum"] == 1


def test_path_parameters_and_if_match_are_described_as_the_routes_match(doc: dict[str, Any]) -> None:
    checked = 0
    for path, method, op in operations(doc):
        for param in op.get("parameters", []):
            if param["in"] == "path":
                checked += 1
                assert "pattern" in param["schema"], f"{method} {path}: path parameter {param['name']} unbounded"
            if param["name"] == "If-Match":
                assert param["required"] is path.startswith("/api/"), (path, method)  # 428 on the tenant surface
                assert re.match(param["schema"]["pattern"], '"3"') and not re.match(param["schema"]["pattern"], "²")
                assert "428" in op["responses"] or not param["required"]
    assert checked >= 33


def test_every_error_status_answers_the_problem_body(doc: dict[str, Any]) -> None:
    for path, method, op in operations(doc):
        errors = {code: r for code, r in op["responses"].items() if code.startswith(("4", "5"))}
        if op["operationId"] != "healthz":
            assert {"400", "401", "403"} <= set(errors), (path, method)
        for code, response in errors.items():
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (path, method, code)


def _reason_strings() -> set[str]:
    text = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p != OWN)
    return set(re.findall(r"[\"']([a-z][a-z0-9_]*)[\"']", text))


def test_every_documented_reason_is_one_the_code_answers(doc: dict[str, Any]) -> None:
    known = _reason_strings()
    for path, method, op in operations(doc):
        reasons = op["x-reasons"]
        assert reasons == sorted(set(reasons)), (path, method)
        unknown = set(reasons) - known
        assert not unknown, f"{method} {path}: x-reasons names no reason of the code: {sorted(unknown)}"
        if op["operationId"] != "healthz":
            assert {"unauthenticated", "forbidden"} <= set(reasons), (path, method)
    replace = doc["paths"]["/api/v1/cmp/projects/{project}/deploy-schedules/{name}"]["put"]["x-reasons"]
    assert {"unknown_target", "overlapping_occurrences", "unknown_deploy", "precondition_required"} <= set(replace)


def test_the_reason_check_itself_refuses_a_made_up_reason() -> None:
    assert "version_mismatch" in _reason_strings() and "no_such_reason_anywhere" not in _reason_strings()


def test_the_checked_in_copy_is_the_tightened_one() -> None:
    text = (ROOT / "docs" / "openapi.json").read_text()
    assert '"x-reasons"' in text and '"$ref": "#/components/schemas/ScheduleDocument"' in text


SCHEDULE_MODULES = ("domain/spec.py", "domain/checks.py", "domain/crons.py", "domain/calendars.py",
                    "domain/documents.py", "engine/operations.py", "api/documents.py")
_RAISED = re.compile(r"FieldErrorCarrier\(\s*\"([a-z_]+)\"|FieldError\(\s*[^,()]+(?:\([^()]*\))?,\s*\"([a-z_]+)\""
                     r"|^\s*\"[a-z_]+\": \(\"([a-z_]+)\",", re.M)


def raised_in(module: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in _RAISED.finditer((PACKAGE / module).read_text())}


def test_every_document_reason_the_domain_raises_is_listed_where_documents_are_written(doc: dict[str, Any]) -> None:
    raised = set().union(*(raised_in(m) for m in SCHEDULE_MODULES)) - {"dropped_placement_field"}  # a warning
    assert {"unknown_target", "invalid_cron", "not_an_integer", "unknown_deploy", "invalid_yaml"} <= raised
    raised -= {"invalid_yaml"}  # API bodies are JSON (415 otherwise)
    for op_id in ("admin_create", "tenant_create", "admin_replace", "tenant_replace", "tenant_dry_run_new"):
        op = next(o for _p, _m, o in operations(doc) if o["operationId"] == op_id)
        missing = raised - set(op["x-reasons"])
        assert not missing, f"{op_id}: reasons the domain raises but x-reasons omits: {sorted(missing)}"
