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
            assert "$ref" in entry["schema"], (
                f"{method} {path}: the body schema is not a named type"
            )
            found = list(loose(doc, entry["schema"], set(), f"{method} {path}"))
            assert not found, (
                f"{method} {path}: loose objects (additionalProperties not false) at {found}"
            )
    assert (
        bodies >= 12
    )  # create, replace, both dry-runs ×2 surfaces, admission ×2, reservation, repin


def test_schedule_documents_carry_the_domain_bounds(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    schedule = schemas["ScheduleDocument"]
    assert set(schedule["required"]) == {"name", "timezone", "targets"}
    assert schedule["properties"]["windows"]["maxItems"] == 200
    assert schedule["properties"]["mode"]["enum"] == ["enforce", "observe"]
    recurring = schemas["RecurringWindow"]["properties"]
    assert (
        recurring["priority"]["maximum"] == 1_000_000_000
        and recurring["kind"]["const"] == "recurring"
    )
    assert re.fullmatch(recurring["duration"]["pattern"].strip("^$"), "1d2h")
    assert not re.fullmatch(recurring["duration"]["pattern"].strip("^$"), "10 hours")
    name = re.compile(schedule["properties"]["name"]["pattern"].removesuffix("$") + r"\Z")
    assert name.match("gpu-pool-h100-shared") and not name.match("gpu-") and not name.match("Gpu")
    assert schemas["StateDocument"]["properties"]["replicas"]["anyOf"][0]["minimum"] == 1


def test_path_parameters_and_if_match_are_described_as_the_routes_match(
    doc: dict[str, Any],
) -> None:
    checked = 0
    for path, method, op in operations(doc):
        for param in op.get("parameters", []):
            if param["in"] == "path":
                checked += 1
                assert "pattern" in param["schema"], (
                    f"{method} {path}: path parameter {param['name']} unbounded"
                )
            if param["name"] == "If-Match":
                assert param["required"] is path.startswith("/api/"), (
                    path,
                    method,
                )  # 428 on the tenant surface
                assert re.match(param["schema"]["pattern"], '"3"') and not re.match(
                    param["schema"]["pattern"], "²"
                )
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
        assert not unknown, (
            f"{method} {path}: x-reasons names no reason of the code: {sorted(unknown)}"
        )
        if op["operationId"] != "healthz":
            assert {"unauthenticated", "forbidden"} <= set(reasons), (path, method)
    replace = doc["paths"]["/api/v1/cmp/projects/{project}/deploy-schedules/{name}"]["put"][
        "x-reasons"
    ]
    assert {
        "unknown_target",
        "overlapping_occurrences",
        "unknown_deploy",
        "precondition_required",
    } <= set(replace)


def test_the_reason_check_itself_refuses_a_made_up_reason() -> None:
    assert (
        "version_mismatch" in _reason_strings()
        and "no_such_reason_anywhere" not in _reason_strings()
    )


def test_the_checked_in_copy_is_the_tightened_one() -> None:
    text = (ROOT / "docs" / "openapi.json").read_text()
    assert '"x-reasons"' in text and '"$ref": "#/components/schemas/ScheduleDocument"' in text


SCHEDULE_MODULES = (
    "domain/spec.py",
    "domain/checks.py",
    "domain/crons.py",
    "domain/calendars.py",
    "domain/documents.py",
    "engine/operations.py",
    "api/documents.py",
)
_RAISED = re.compile(
    r"FieldErrorCarrier\(\s*\"([a-z_]+)\"|FieldError\(\s*[^,()]+(?:\([^()]*\))?,\s*\"([a-z_]+)\""
    r"|^\s*\"[a-z_]+\": \(\"([a-z_]+)\",",
    re.M,
)


def raised_in(module: str) -> set[str]:
    return {
        next(g for g in m.groups() if g) for m in _RAISED.finditer((PACKAGE / module).read_text())
    }


def test_every_document_reason_the_domain_raises_is_listed_where_documents_are_written(
    doc: dict[str, Any],
) -> None:
    raised = set().union(*(raised_in(m) for m in SCHEDULE_MODULES)) - {
        "dropped_placement_field"
    }  # a warning
    assert {
        "unknown_target",
        "invalid_cron",
        "not_an_integer",
        "unknown_deploy",
        "invalid_yaml",
    } <= raised
    raised -= {"invalid_yaml"}  # API bodies are JSON (415 otherwise)
    for op_id in (
        "admin_create",
        "tenant_create",
        "admin_replace",
        "tenant_replace",
        "tenant_dry_run_new",
    ):
        op = next(o for _p, _m, o in operations(doc) if o["operationId"] == op_id)
        missing = raised - set(op["x-reasons"])
        assert not missing, (
            f"{op_id}: reasons the domain raises but x-reasons omits: {sorted(missing)}"
        )


# -- every reason the error mapping answers, per operation, under each layer's failure -----------

RESERVATION = {
    "id": "rsv-alpha",
    "node": "cmp-01",
    "gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b3"],
    "namespace": "cmp-alpha",
    "mode": "time_sliced",
    "gpu_memory_mib": 143771,
    "headroom": 0.95,
}


def requests_of_every_operation() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(operation id, caller, method and path, keywords): one well-formed request per operation."""
    from api_support import ADMIN, alpha_schedule, seed, tenant_base

    out: list[tuple[str, str, str, dict[str, Any]]] = []
    for tag, who, base, doc_of in (
        ("admin", "admin", ADMIN, seed),
        ("tenant", "alpha", tenant_base("alpha"), alpha_schedule),
    ):
        document = doc_of()
        one = f"{base}/{document['name']}"
        fresh = {**document, "name": "another"}
        out += [
            (f"{tag}_create", who, f"POST {base}", {"json": fresh}),
            (f"{tag}_list", who, f"GET {base}", {}),
            (f"{tag}_get", who, f"GET {one}", {}),
            (f"{tag}_replace", who, f"PUT {one}", {"json": document, "headers": {"If-Match": "*"}}),
            (f"{tag}_apply_now", who, f"POST {one}:apply-now", {}),
            (f"{tag}_dry_run", who, f"POST {one}:dry-run", {"json": {}}),
            (
                f"{tag}_dry_run",
                who,
                f"POST {one}:dry-run",
                {"json": {"from": "2026-10-21T00:00:00+07:00", "to": "2026-10-22T00:00:00+07:00"}},
            ),
            (f"{tag}_dry_run_new", who, f"POST {base}:dry-run", {"json": {"schedule": document}}),
            (f"{tag}_status", who, f"GET {one}/status", {}),
            (f"{tag}_timeline", who, f"GET {one}/timeline", {}),
        ]
    rsv = "/admin/reservations"
    tenant_rsv = "/api/v1/cmp/projects/alpha/reservations"
    ask = {"json": {"deploy_id": "alpha-chat", "memory_mib": 100}}
    out += [
        ("admin_list_reservations", "admin", f"GET {rsv}", {}),
        (
            "admin_create_reservation",
            "admin",
            f"POST {rsv}",
            {
                "json": {
                    **RESERVATION,
                    "id": "rsv-other",
                    "gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b5"],
                }
            },
        ),
        ("admin_get_reservation", "admin", f"GET {rsv}/rsv-alpha", {}),
        ("admin_admission_check", "admin", f"POST {rsv}/rsv-alpha:admission-check", ask),
        (
            "admin_repin_reservation",
            "admin",
            f"POST {rsv}/rsv-alpha:repin",
            {"json": {"gpu_uuids": ["GPU-8983c66a-23df-e63b-4c2f-afcae9ec79b4"], "generation": 1}},
        ),
        ("tenant_list_reservations", "alpha", f"GET {tenant_rsv}", {}),
        ("tenant_get_reservation", "alpha", f"GET {tenant_rsv}/rsv-alpha", {}),
        ("tenant_admission_check", "alpha", f"POST {tenant_rsv}/rsv-alpha:admission-check", ask),
        ("admin_audit", "admin", "GET /admin/audit", {}),
        ("admin_release_reservation", "admin", f"POST {rsv}/rsv-alpha:release", {}),
        (
            "admin_delete",
            "admin",
            f"DELETE {ADMIN}/{seed()['name']}",
            {"headers": {"If-Match": "*"}},
        ),
        (
            "tenant_delete",
            "alpha",
            f"DELETE {tenant_base('alpha')}/{alpha_schedule()['name']}",
            {"headers": {"If-Match": "*"}},
        ),
        ("healthz", "anonymous", "GET /healthz", {}),
    ]
    return out


class CoreDown:
    """A core whose every call times out, as a Kubernetes API server that stopped answering."""

    def __getattr__(self, name: str) -> Any:
        from gps_dagster.ports import Transient

        def timed_out(*_a: Any, **_kw: Any) -> Any:
            raise Transient(f"{name}: read timed out (30 s)", reason="api_timeout")

        return timed_out


def answered_reasons(api: Api, doc: dict[str, Any]) -> dict[str, set[str]]:
    """Per operation id, the reasons its error answers carried (none a 500, each status
    documented)."""
    listed = {o["operationId"]: o for _p, _m, o in operations(doc)}
    seen: dict[str, set[str]] = {}
    for op_id, who, call, kw in requests_of_every_operation():
        assert op_id in listed, op_id
        method, path = call.split(" ", 1)
        answer = api.call(who, method, path, **kw)
        assert answer.status_code != 500, (op_id, answer.text)
        if answer.status_code >= 400:
            assert str(answer.status_code) in listed[op_id]["responses"], (
                op_id,
                answer.status_code,
            )
            body = answer.json()
            seen.setdefault(op_id, set()).update(
                {body["reason"], *(e["reason"] for e in body["errors"])}
            )
    return seen


def _x_reasons(doc: dict[str, Any]) -> dict[str, set[str]]:
    return {o["operationId"]: set(o["x-reasons"]) for _p, _m, o in operations(doc)}


def _unlisted(seen: dict[str, set[str]], doc: dict[str, Any]) -> dict[str, list[str]]:
    listed = _x_reasons(doc)
    return {op: sorted(r - listed[op]) for op, r in seen.items() if r - listed[op]}


def _world(api: Api) -> None:
    from api_support import alpha_schedule, seed, tenant_base

    assert api.call("admin", "POST", "/admin/deploy-schedules", json=seed()).status_code == 201
    assert api.call("alpha", "POST", tenant_base("alpha"), json=alpha_schedule()).status_code == 201
    assert api.call("admin", "POST", "/admin/reservations", json=RESERVATION).status_code == 201


def test_every_reason_an_operation_answers_when_the_core_times_out_is_in_its_x_reasons(
    api: Api, doc: dict[str, Any]
) -> None:
    """The core (Kubernetes, the simulated pool) down: its errors answer a reason x-reasons lists.

    A backend's own reason (``api_timeout``, ``api_unreachable``, …) is an open set; the API answers
    the port's closed one (``core_unavailable``, 503) and keeps the backend's in the message.
    """
    _world(api)
    api.services.core = CoreDown()
    api.services.engine.core = api.services.core
    seen = answered_reasons(api, doc)
    assert "core_unavailable" in set().union(*seen.values()), seen
    assert not _unlisted(seen, doc), _unlisted(seen, doc)


def test_every_reason_an_operation_answers_when_the_store_is_down_is_in_its_x_reasons(
    api: Api, doc: dict[str, Any], tmp_path: Any
) -> None:
    """The database gone (its file unreachable): every operation reads the store, so every
    operation answers ``store_unavailable`` (503) — and lists it."""
    _world(api)
    api.services.store.engine.dispose()
    (tmp_path / "gps.sqlite").rename(tmp_path / "moved.sqlite")
    (
        tmp_path / "gps.sqlite"
    ).mkdir()  # SQLite cannot open a directory: "unable to open database file"
    seen = answered_reasons(api, doc)
    assert all("store_unavailable" in r for op, r in seen.items() if op != "healthz"), seen
    assert len(seen) >= 30, sorted(seen)
    assert not _unlisted(seen, doc), _unlisted(seen, doc)
