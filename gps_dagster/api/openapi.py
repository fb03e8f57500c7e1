"""The OpenAPI document, tightened to describe inputs exactly as the server validates them.

FastAPI derives the document from the endpoints' signatures, and the schedule and reservation
bodies are plain ``dict``s there (the domain validates them, so the API refuses a document with the
same paths, reasons and fixes as the CLI): the derived document said "any object". ``tighten``
rewrites the derived document in place:

* request bodies get typed schemas (``ScheduleDocument``, ``ReservationSpec``, every object
  ``additionalProperties: false``) with the domain's own bounds, patterns and enums;
* path parameters get the patterns the routes match (``schedule_name``, ``project``), the
  ``If-Match`` header its pattern, and it is **required** on the tenant surface (428 without it);
* every operation lists the error statuses it can answer with the ``ErrorBody`` schema;
* ``x-reasons`` lists, per operation, every refusal ``reason`` the operation can answer (the
  answer's own ``reason`` or that of an entry of its ``errors``) —
  including the cross-field and state rules JSON Schema cannot express (an unknown target,
  overlapping windows, a deploy another schedule owns), so a client can tell them apart.
"""

# Decisions embodied here (docs/decisions.md):
# * “The OpenAPI document describes inputs exactly; what a schema cannot say is in x-reasons”

from __future__ import annotations

import copy
from typing import Any

from gps_dagster.api.auth import PROJECT as PROJECT_RE
from gps_dagster.api.errors import CORE_REASONS, CORE_STATUSES, STORE_REASONS, STORE_STATUSES
from gps_dagster.api.models import GPU_UUID_PATTERN
from gps_dagster.api.schedules import ScheduleName
from gps_dagster.domain.spec import (
    MAX_DEPLOY_ID,
    MAX_GRACE_S,
    MAX_PRIORITY,
    MAX_REPLICAS,
    MAX_SKIP_DATES,
    MAX_WINDOWS,
)

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
SCHEDULE_NAME = f"^{ScheduleName.regex}$"
"""A schedule name in a path (the ``schedule_name`` convertor of the routes, read from it)."""
LOCAL_NAME = r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$"
"""A schedule name in a body: it also ends with a letter or digit."""
PROJECT = PROJECT_RE.pattern.removesuffix(r"\Z") + "$"
"""A project in a path: the pattern ``auth`` judges scopes with (JSON Schema has no ``\\Z``)."""
IF_MATCH = r'^(\*|(W/)?"?[1-9][0-9]{0,17}"?)$'
INSTANT = (
    r"^(19[7-9][0-9]|[2-8][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-3]):[0-5][0-9])$"
)
"""An RFC 3339 instant from 1970 to before 9000 (days 29–31 are valid too; the pattern lists the
days every month has, which is what a client needs to produce a valid one)."""
INSTANT_TEXT = {
    "type": "string",
    "format": "date-time",
    "pattern": INSTANT,
    "description": "RFC 3339 with a UTC offset, from 1970-01-01 to before 9000-01-01.",
}

_STRICT: dict[str, Any] = {"type": "object", "additionalProperties": False}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


DEPLOY_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_DEPLOY_ID,
    "description": (
        "A deploy the pool knows (unknown_deploy), of this surface's project on a tenant surface, "
        "owned by no other schedule (target_owned)."
    ),
}
STATE = {"type": "string", "enum": ["running", "stopped"]}
WHOLE = "A whole number spelled without a fraction (10, not 10.0: not_an_integer)."
REPLICAS = {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS, "description": WHOLE}
WINDOW_BASE: dict[str, Any] = {
    "name": {
        "type": "string",
        "minLength": 1,
        "maxLength": 128,
        "description": "Unique in the schedule.",
    },
    "priority": {
        "type": "integer",
        "minimum": -MAX_PRIORITY,
        "maximum": MAX_PRIORITY,
        "description": "Higher wins; two windows of equal priority must not overlap. " + WHOLE,
    },
    "states": {
        "type": "array",
        "minItems": 1,
        "items": _ref("StateDocument"),
        "description": "One per target at most, each naming a target of the schedule.",
    },
}

COMPONENTS: dict[str, dict[str, Any]] = {
    "TargetDocument": {
        **_STRICT,
        "required": ["model_deploy_id", "default_state"],
        "properties": {
            "model_deploy_id": DEPLOY_ID,
            "default_state": STATE,
            "default_allow_downtime": {"type": "boolean"},
            "default_replicas": _nullable(REPLICAS),
            "ready_by": _nullable({"type": "boolean"}),
        },
    },
    "StateDocument": {
        **_STRICT,
        "required": ["model_deploy_id", "desired_state"],
        "properties": {
            "model_deploy_id": {
                **DEPLOY_ID,
                "description": "A target of this schedule (unknown_target).",
            },
            "desired_state": STATE,
            "allow_downtime": _nullable({"type": "boolean"}),
            "replicas": _nullable(REPLICAS),
        },
    },
    "HolidayCalendar": {
        **_STRICT,
        "required": ["country"],
        "properties": {
            "country": {
                "type": "string",
                "pattern": "^[A-Z]{2,3}$",
                "description": "ISO 3166-1 code the holidays package knows, e.g. VN.",
            },
            "subdivision": _nullable({"type": "string"}),
            "categories": {
                "type": "array",
                "minItems": 1,
                "maxItems": 8,
                "items": {"type": "string"},
            },
            "decided_by": {
                "type": "string",
                "description": "Replaced by the server's holidays package version.",
            },
        },
    },
    "SkipDocument": {
        **_STRICT,
        "properties": {
            "holidays": _nullable(_ref("HolidayCalendar")),
            "dates": {
                "type": "array",
                "maxItems": MAX_SKIP_DATES,
                "items": {"type": "string", "format": "date"},
            },
        },
        "description": "Name holidays, dates or both (empty_skip).",
    },
    "RecurringWindow": {
        **_STRICT,
        "required": ["kind", "name", "priority", "states", "cron", "duration"],
        "properties": {
            "kind": {"type": "string", "const": "recurring"},
            **WINDOW_BASE,
            "cron": {
                "type": "string",
                "minLength": 9,
                "maxLength": 200,
                "pattern": r"^\S+( +\S+){4}$",
                "description": (
                    "5-field cron in the schedule's time zone (invalid_cron, cron_six_fields)."
                ),
            },
            "duration": {
                "type": "string",
                "minLength": 2,
                "maxLength": 40,
                "pattern": "^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$",
                "description": (
                    "Elapsed time, e.g. 10h, 90m, 1d2h; more than 0, at most 3660d, shorter than "
                    "the gap between two fires (overlapping_occurrences)."
                ),
            },
            "skip": _nullable(_ref("SkipDocument")),
        },
    },
    "OneShotWindow": {
        **_STRICT,
        "required": ["kind", "name", "priority", "states", "active_from", "active_until"],
        "properties": {
            "kind": {"type": "string", "const": "one_shot"},
            **WINDOW_BASE,
            "active_from": INSTANT_TEXT,
            "active_until": {
                **INSTANT_TEXT,
                "description": INSTANT_TEXT["description"] + " After active_from.",
            },
        },
    },
    "ScheduleDocument": {
        **_STRICT,
        "required": ["name", "timezone", "targets"],
        "properties": {
            "name": {
                "type": "string",
                "pattern": LOCAL_NAME,
                "maxLength": 128,
                "description": (
                    "The schedule's name; in a path operation, the path's name (or omitted)."
                ),
            },
            "timezone": {
                "type": "string",
                "pattern": r"^[A-Za-z0-9_+-]{1,30}(/[A-Za-z0-9_+-]{1,30}){0,3}$",
                "description": "An IANA time zone the server knows, e.g. Asia/Ho_Chi_Minh.",
            },
            "mode": {"type": "string", "enum": ["enforce", "observe"]},
            "transition_order": {"type": "string", "enum": ["release_first", "acquire_first"]},
            "scope": {
                "type": "string",
                "pattern": r"^(admin|cmp:[a-z0-9][a-z0-9-]{0,62})$",
                "description": "The surface's scope (scope_mismatch otherwise): omit it.",
            },
            "enabled": {"type": "boolean"},
            "ready_by": {"type": "boolean"},
            "unschedulable_grace_s": _nullable(
                {"type": "number", "minimum": 0, "maximum": MAX_GRACE_S}
            ),
            "targets": {
                "type": "array",
                "minItems": 1,
                "items": _ref("TargetDocument"),
                "description": "Each deploy once (duplicate_target).",
            },
            "windows": {
                "type": "array",
                "maxItems": MAX_WINDOWS,
                "items": {
                    "oneOf": [_ref("RecurringWindow"), _ref("OneShotWindow")],
                    "discriminator": {
                        "propertyName": "kind",
                        "mapping": {
                            "recurring": "#/components/schemas/RecurringWindow",
                            "one_shot": "#/components/schemas/OneShotWindow",
                        },
                    },
                },
                "description": (
                    "Names unique (duplicate_window); cheap enough to evaluate "
                    "(schedule_too_dense)."
                ),
            },
        },
    },
    "ReservationSpec": {
        **_STRICT,
        "required": ["id", "node", "gpu_uuids", "namespace", "mode", "gpu_memory_mib"],
        "properties": {
            "id": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
            "node": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"},
            "gpu_uuids": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "pattern": GPU_UUID_PATTERN},
            },
            "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
            "mode": {"type": "string", "enum": ["exclusive", "time_sliced"]},
            "gpu_memory_mib": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10_000_000,
                "description": WHOLE,
            },
            "headroom": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        },
        "anyOf": [  # time_sliced_multi_gpu: a time-sliced budget is per GPU
            {"properties": {"mode": {"const": "exclusive"}}},
            {"properties": {"gpu_uuids": {"maxItems": 1}}},
        ],
        "description": (
            "A time-sliced reservation holds exactly one GPU; the GPUs are free "
            "(gpu_already_reserved)."
        ),
    },
}

AUTH = (
    "unauthenticated",
    "forbidden",
    "csrf_refused",
    "project_not_found",
    "invalid_request",
    *STORE_REASONS,
)
"""Every secured operation: the caller is judged by a read of the store (its token, its session), so
the store's outage is an answer of every one (from the error mapping, ``errors.STORE_REASONS``)."""
WRITE = ("read_only_token",)
DOCUMENT = (
    "invalid_document",
    "invalid_json",
    "body_too_large",
    "unsupported_media_type",
    "duplicate_key",
    # field rules the schema states
    "missing",
    "unknown_field",
    "invalid_value",
    "too_small",
    "too_large",
    "too_short",
    "too_long",
    "not_a_string",
    "not_a_number",
    "not_a_boolean",
    "not_a_list",
    "not_an_object",
    "invalid_name",
    "invalid_scope",
    "invalid_duration",
    "invalid_datetime",
    "naive_datetime",
    "instant_out_of_range",
    "invalid_date",
    "replicas_zero",
    "replicas_negative",
    "not_an_integer",
    "not_finite",
    "document_too_large",
    # rules beyond a JSON schema
    "unknown_timezone",
    "invalid_cron",
    "cron_six_fields",
    "duration_too_long",
    "duration_not_positive",
    "unknown_country",
    "unknown_subdivision",
    "unknown_category",
    "empty_skip",
    "too_many_windows",
    "duplicate_target",
    "duplicate_window",
    "unknown_target",
    "duplicate_state",
    "empty_window",
    "overlapping_occurrences",
    "ambiguous_priority",
    "schedule_too_dense",
    "scope_mismatch",
    "name_mismatch",
    "name_scope_mismatch",
    "unknown_deploy",
    "cmp_managed",
    "unsupported_scale_for_mode",
)
RANGE = ("invalid_instant", "instant_out_of_range", "empty_range", "range_too_long")
DRY_RUN = ("ambiguous_request", "incomplete_range", *RANGE)
RESERVATION = (
    "invalid_node",
    "invalid_headroom",
    "invalid_gpu_uuid",
    "duplicate_gpu_uuid",
    "time_sliced_multi_gpu",
)
SCHEDULE_STATE = ("schedule_not_found",)

REASONS: dict[str, tuple[str, ...]] = {
    "create": (*WRITE, *DOCUMENT, "schedule_exists", "schedule_conflict", "target_owned"),
    "list": ("invalid_request",),
    "get": SCHEDULE_STATE,
    "replace": (
        *WRITE,
        *DOCUMENT,
        *SCHEDULE_STATE,
        "target_owned",
        "version_mismatch",
        "invalid_if_match",
        "schedule_in_flight",
        "precondition_required",
    ),
    "delete": (
        *WRITE,
        *SCHEDULE_STATE,
        "version_mismatch",
        "invalid_if_match",
        "precondition_required",
        "schedule_in_flight",
    ),
    "apply_now": (*WRITE, *SCHEDULE_STATE, "busy", "rate_limited"),
    "dry_run": (*DOCUMENT, *SCHEDULE_STATE, *DRY_RUN),
    "dry_run_new": (*DOCUMENT, *DRY_RUN, "missing_schedule"),
    "status": SCHEDULE_STATE,
    "timeline": (*SCHEDULE_STATE, *RANGE),
    "audit": ("invalid_request",),
    "list_reservations": (),
    "get_reservation": ("reservation_not_found",),
    "admission_check": (
        "reservation_not_found",
        "schedule_not_found",
        "invalid_document",
        "invalid_json",
        "unsupported_media_type",
        "instant_out_of_range",
        "body_too_large",
        "duplicate_key",
    ),
    "create_reservation": (*DOCUMENT, *RESERVATION, "reservation_exists", "gpu_already_reserved"),
    "release_reservation": ("reservation_not_found", "invalid_transition"),
    "repin_reservation": (
        "reservation_not_found",
        "invalid_transition",
        "stale_generation",
        "gpu_already_reserved",
        *RESERVATION,
        "invalid_json",
        "unsupported_media_type",
        "invalid_document",
        "duplicate_key",
        "body_too_large",
    ),
    "healthz": (),
}
"""The refusal reasons each operation can answer (by operation id without its surface prefix)."""

CORE_READS = frozenset(
    (
        "create",
        "replace",
        "apply_now",
        "dry_run",
        "dry_run_new",
        "list_reservations",
        "get_reservation",
        "admission_check",
        "create_reservation",
        "release_reservation",
        "repin_reservation",
    )
)
"""The operations that call the core (Kubernetes, the simulated pool): each also answers the
reasons the error mapping gives the core's errors (``errors.CORE_REASONS``, 502/503)."""

STATUSES: dict[str, tuple[int, ...]] = {
    "create": (409, 413, 415, 422, 503),
    "replace": (409, 412, 413, 415, 422, 428, 503),
    "delete": (409, 412, 428),
    "apply_now": (409, 429, 503),
    "dry_run": (413, 415, 422, 503),
    "dry_run_new": (413, 415, 422, 503),
    "admission_check": (413, 415, 422),
    "create_reservation": (409, 413, 415, 422),
    "repin_reservation": (409, 412, 413, 415, 422),
}


def kind_of(operation_id: str) -> str:
    """``create`` of ``admin_create``/``tenant_create``; reservation operations keep their names."""
    for prefix in ("admin_", "tenant_"):
        if operation_id.startswith(prefix):
            return operation_id.removeprefix(prefix)
    return operation_id


def _error_response(status: int) -> dict[str, Any]:
    return {
        "description": _PHRASES.get(status, "Error"),
        "content": {"application/json": {"schema": ERROR_REF}},
    }


_PHRASES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    428: "Precondition Required",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


def _parameter(op: dict[str, Any], tenant: bool) -> None:
    for param in op.get("parameters", []):
        name, schema = param["name"], param.setdefault("schema", {})
        if param["in"] == "path" and name in ("name", "reservation_id"):
            param["schema"] = {
                "type": "string",
                "pattern": SCHEDULE_NAME,
                "title": schema.get("title", name),
            }
        elif param["in"] == "path" and name == "project":
            param["schema"] = {"type": "string", "pattern": PROJECT, "title": "Project"}
        elif param["in"] == "header" and name == "If-Match":
            param["schema"] = {"type": "string", "pattern": IF_MATCH, "title": "If-Match"}
            param["required"] = tenant
        elif param["in"] == "query" and name in ("from", "to"):
            param["schema"] = {**INSTANT_TEXT, "title": name}


def _body(op: dict[str, Any], kind: str) -> None:
    content = op.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return
    if kind == "create":
        content["schema"] = _ref("ScheduleDocument")
    elif kind == "replace":
        content["schema"] = _ref("ScheduleAtPath")
    elif kind == "create_reservation":
        content["schema"] = _ref("ReservationSpec")
    elif kind == "dry_run_new":
        content["schema"] = _ref("DryRunNewIn")


_ABSENT = {"not": {"anyOf": [{"required": ["at"]}, {"required": ["from"]}, {"required": ["to"]}]}}


def _dry_run_in(derived: dict[str, Any], *, new: bool) -> dict[str, Any]:
    """An instant (``at``), a range (``from`` and ``to``) or neither (now); ``new``: a schedule
    too."""
    schema = copy.deepcopy(derived)
    props = schema.setdefault("properties", {})
    props.update(
        {
            "at": INSTANT_TEXT,
            "from": INSTANT_TEXT,
            "to": INSTANT_TEXT,
            "schedule": _ref("ScheduleDocument") if new else _nullable(_ref("ScheduleAtPath")),
        }
    )
    schema["anyOf"] = [
        {"required": ["at"], "not": {"anyOf": [{"required": ["from"]}, {"required": ["to"]}]}},
        {"required": ["from", "to"], "not": {"required": ["at"]}},
        _ABSENT,
    ]
    if new:
        schema["required"] = ["schedule"]
        schema["title"] = "DryRunNewIn"
        schema["description"] = (
            "Dry-run an unsaved schedule: ``schedule``, and an instant or a range."
        )
    return schema


def tighten(document: dict[str, Any]) -> dict[str, Any]:
    """The derived ``document`` with exact input schemas, statuses and ``x-reasons`` (see the
    module)."""
    doc = copy.deepcopy(document)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(copy.deepcopy(COMPONENTS))
    at_path = copy.deepcopy(schemas["ScheduleDocument"])
    at_path["required"] = ["timezone", "targets"]
    at_path["description"] = (
        "A schedule document at a path that names it: name omitted or the path's."
    )
    schemas["ScheduleAtPath"] = at_path
    if "DryRunIn" in schemas:
        schemas["DryRunIn"] = _dry_run_in(schemas["DryRunIn"], new=False)
        schemas["DryRunNewIn"] = _dry_run_in(schemas["DryRunIn"], new=True)
    admission = schemas.get("AdmissionIn", {}).get("properties", {})
    if "at" in admission:
        admission["at"] = _nullable(INSTANT_TEXT)
    if "schedule" in admission:
        admission["schedule"] = _nullable({"type": "string", "pattern": SCHEDULE_NAME})
    for path, item in doc.get("paths", {}).items():
        tenant = path.startswith("/api/v1/cmp/")
        for op in item.values():
            kind = kind_of(op.get("operationId", ""))
            _parameter(op, tenant)
            _body(op, kind)
            responses = op.setdefault("responses", {})
            secured = kind != "healthz"
            codes = set(STATUSES.get(kind, ())) | (
                {400, 401, 403, *STORE_STATUSES} if secured else set()
            )
            if kind in CORE_READS:
                codes |= set(CORE_STATUSES)
            if secured and (tenant or "{" in path):
                codes.add(404)
            for code in sorted(codes):
                responses[str(code)] = _error_response(code)
            if 422 not in codes:
                responses.pop("422", None)  # FastAPI's default; parameters answer 400 here
            reasons = set(REASONS.get(kind, ())) | (set(AUTH) if secured else set())
            if kind in CORE_READS:
                reasons |= set(CORE_REASONS)
            op["x-reasons"] = sorted(reasons)
    return doc
