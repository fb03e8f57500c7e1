"""Property-based tests of every operation of the served OpenAPI document (schemathesis), all checks
on.

Schemathesis generates requests from ``/openapi.json`` and calls the app in process through
its ASGI transport (no socket, bounded time). Every response must be no 5xx and must match the
documented status codes, content type, headers and schema, and a request the document calls
valid must not be refused as malformed (``positive_data_acceptance``: no 400, 412, 413, 415,
422 or 428 for schema-valid data; issue 21 item 17). Cases run with an admin token, so the
generated bodies reach the operations instead of stopping at 401; a bounded, derandomised
number of examples per operation keeps the run reproducible and its time bounded
(≥ 1,000 cases in all, counted by the last test of this file).

The document states every per-field rule (types, patterns, bounds, enums, required headers).
What no JSON schema can state — a target the pool knows, windows that do not overlap, a range
whose end follows its start — is listed in each operation's ``x-reasons``; for those rules only,
``narrowed`` below draws from a subset of the documented values that is valid in this test's
world (its pool and seed), each narrowing naming the reasons it avoids. A test checks that every
narrowed schema only narrows (its values validate against the served document), and every
refusal a generated case receives must carry a reason its operation documents.
"""

from __future__ import annotations

import copy
import tempfile
from collections import Counter
from typing import Any

import jsonschema
import pytest
import schemathesis
from api_support import make_api, seed
from hypothesis import HealthCheck, given, settings

_DIR = tempfile.TemporaryDirectory(prefix="gps-schemathesis-")
API = make_api(f"sqlite:///{_DIR.name}/schemathesis.sqlite")
API.call("admin", "POST", "/admin/deploy-schedules", json=seed())
SERVED: dict[str, Any] = API.client.get("/openapi.json").json()

# The narrowing: values of the documented types that this world accepts (see the module).
FREE_DEPLOY = {
    "admin": "md-bge-embed",
    "tenant": "alpha-chat",
}  # unknown_deploy, cmp_managed: a deploy the pool knows, of the surface's project
PROJECT = "alpha"  # project_not_found is a state; unknown_deploy: the project's deploys exist
CRONS = ["0 8 * * 1-5", "30 22 * * *", "0 0 1 * *"]  # invalid_cron: crons the evaluator accepts
DURATIONS = [
    "1h",
    "10h",
    "90m",
]  # overlapping_occurrences: shorter than a day, every cron fires at most daily
ZONES = ["Asia/Ho_Chi_Minh", "UTC", "Europe/Berlin"]  # unknown_timezone: zones zoneinfo has
WEEK = ("2026-10-19T00:00:00+07:00", "2026-10-26T00:00:00+07:00")  # empty_range, range_too_long


def narrowed(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with the cross-field rules of ``x-reasons`` narrowed away (each names its
    reasons)."""
    doc = copy.deepcopy(document)
    schemas = doc["components"]["schemas"]
    # duplicate_target, duplicate_state, duplicate_window, unknown_target, ambiguous_priority,
    # schedule_too_dense: one target, one window, one state naming that target.
    schemas["ScheduleDocument"]["properties"]["targets"]["maxItems"] = 1
    schemas["ScheduleDocument"]["properties"]["windows"]["maxItems"] = 1
    schemas["ScheduleDocument"]["properties"]["timezone"] = {"enum": ZONES}
    # scope_mismatch: the surface gives the scope.
    del schemas["ScheduleDocument"]["properties"]["scope"]
    for window in ("RecurringWindow", "OneShotWindow"):
        schemas[window]["properties"]["states"]["maxItems"] = 1
    recurring = schemas["RecurringWindow"]["properties"]
    recurring["cron"], recurring["duration"] = {"enum": CRONS}, {"enum": DURATIONS}
    # unknown_country, unknown_subdivision, unknown_category, empty_skip: dates only.
    recurring["skip"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["dates"],
        "properties": {
            "dates": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {"enum": ["2026-12-24", "2027-01-01"]},
            }
        },
    }
    # empty_window: from before until.
    schemas["OneShotWindow"]["properties"]["active_from"] = {"enum": [WEEK[0]]}
    schemas["OneShotWindow"]["properties"]["active_until"] = {"enum": [WEEK[1]]}
    # unsupported_scale_for_mode: scale stays as it is.
    del schemas["TargetDocument"]["properties"]["default_replicas"]
    del schemas["StateDocument"]["properties"]["replicas"]
    # empty_range, range_too_long: a week.
    for dry_in in ("DryRunIn", "DryRunNewIn"):
        for key, value in (("from", WEEK[0]), ("to", WEEK[1])):
            schemas[dry_in]["properties"][key] = {"enum": [value]}
    for path, item in doc["paths"].items():
        surface = "tenant" if path.startswith("/api/") else "admin"
        for op in item.values():
            for param in op.get("parameters", []):
                if param["in"] == "path" and param["name"] == "project":
                    param["schema"] = {"enum": [PROJECT]}
                if param["in"] == "query" and param["name"] in ("from", "to"):
                    param["schema"] = {"enum": [WEEK[param["name"] == "to"]]}
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {}).get("$ref", "")
            if ref.endswith(("/ScheduleAtPath", "/DryRunIn")):
                # name_mismatch: a path operation's body takes the name from the path.
                body["schema"] = {
                    "$ref": ref.replace("/ScheduleAtPath", f"/ScheduleAt_{surface}").replace(
                        "/DryRunIn", f"/DryRunAt_{surface}"
                    )
                }
            elif ref.endswith(("/ScheduleDocument", "/DryRunNewIn")):
                body["schema"] = {"$ref": ref + f"_{surface}"}
    for surface, deploy in FREE_DEPLOY.items():
        named = copy.deepcopy(schemas["ScheduleDocument"])
        named["properties"].pop("name")
        named["required"] = [r for r in named["required"] if r != "name"]
        new = copy.deepcopy(schemas["ScheduleDocument"])
        for schedule in (named, new):
            schedule["properties"]["targets"]["items"] = {
                "$ref": f"#/components/schemas/Target_{surface}"
            }
            schedule["properties"]["windows"]["items"] = {
                "oneOf": [
                    {"$ref": f"#/components/schemas/{w}_{surface}"}
                    for w in ("RecurringWindow", "OneShotWindow")
                ]
            }
        schemas[f"ScheduleAt_{surface}"], schemas[f"ScheduleDocument_{surface}"] = named, new
        target = copy.deepcopy(schemas["TargetDocument"])
        target["properties"]["model_deploy_id"] = {"enum": [deploy]}
        schemas[f"Target_{surface}"] = target
        for window in ("RecurringWindow", "OneShotWindow"):
            state = copy.deepcopy(schemas["StateDocument"])
            state["properties"]["model_deploy_id"] = {"enum": [deploy]}
            schemas[f"State_{surface}"] = state
            copied = copy.deepcopy(schemas[window])
            copied["properties"]["states"]["items"] = {
                "$ref": f"#/components/schemas/State_{surface}"
            }
            schemas[f"{window}_{surface}"] = copied
        for dry_name, base, schedule_ref in (
            ("DryRunAt", "DryRunIn", "ScheduleAt"),
            ("DryRunNewIn", "DryRunNewIn", "ScheduleDocument"),
        ):
            dry = copy.deepcopy(schemas[base])
            ref = {"$ref": f"#/components/schemas/{schedule_ref}_{surface}"}
            dry["properties"]["schedule"] = (
                ref if base == "DryRunNewIn" else {"anyOf": [ref, {"type": "null"}]}
            )
            schemas[f"{dry_name}_{surface}"] = dry
    return doc


def whole_numbers(value: Any) -> Any:
    """``value`` with every whole float spelled as an integer (``10.0`` → ``10``).

    JSON Schema counts ``10.0`` as an integer, and schemathesis sends it to prove a server takes
    it; documents are strict (decision 59: ``not_an_integer``, said in the document's integer
    descriptions), a rule no schema keyword can state. The hook keeps every value and its
    meaning, only its spelling changes.
    """
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


NARROWED = narrowed(SERVED)
# 412 answers the stored state (the schedule is at another version), not the request's shape, as
# 404 and 409 do (schemathesis accepts those by default): a generated If-Match names a version the
# document cannot know, nor can a generated reservation `generation` (a repin's fence, R-GPS-9). The
# check below holds a 412 to those two reasons of stored state.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]
CONFIG = schemathesis.Config.from_dict(
    {"checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}}
)
schema = schemathesis.openapi.from_dict(NARROWED, config=CONFIG)
schema.app = API.client.app
OPERATIONS = {op.ok().label: op.ok() for op in schema.get_all_operations()}
REASONS = {
    f"{method.upper()} {path}": set(op["x-reasons"])
    for path, item in SERVED["paths"].items()
    for method, op in item.items()
}
BODIES = {
    f"{method.upper()} {path}": jsonschema.Draft202012Validator(
        {
            **op["requestBody"]["content"]["application/json"]["schema"],
            "components": SERVED["components"],
        }
    )
    for path, item in SERVED["paths"].items()
    for method, op in item.items()
    if "requestBody" in op
}
# Decisions embodied here (docs/decisions.md):
# * “Property tests give no timing verdicts”
STATE_412 = {"version_mismatch", "stale_generation"}
CASES: Counter[str] = Counter()
STATUSES: Counter[tuple[str, int]] = Counter()
EXAMPLES = 45


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_operation_matches_its_documented_contract(label: str) -> None:
    operation = OPERATIONS[label]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case) -> None:
        CASES[label] += 1
        API.clock.advance(
            20
        )  # apply-now's rate limit refills on the virtual clock, never the wall clock
        if isinstance(case.body, dict):
            case.body = whole_numbers(case.body)
        served_body = BODIES.get(label)
        if served_body is not None and isinstance(case.body, dict):
            served_body.validate(
                case.body
            )  # the narrowing only narrows: the served document takes the body
        response = case.call_and_validate(headers=API.as_("admin"))
        STATUSES[label, response.status_code // 100 * 100] += 1
        if response.status_code >= 400:
            reason = response.json()["reason"]
            assert reason in REASONS[label], (
                f"{label} answered reason {reason!r}, not in its x-reasons"
            )
            assert response.status_code != 412 or reason in STATE_412, response.text

    check()
    assert CASES[label] >= 1, f"no case generated for {label}"


def test_zz_enough_cases_ran_over_every_operation() -> None:
    assert set(CASES) == set(OPERATIONS), set(OPERATIONS) - set(CASES)
    assert len(OPERATIONS) >= 30
    print(f"schemathesis: {sum(CASES.values())} cases over {len(CASES)} operations")
    assert sum(CASES.values()) >= 1000, CASES
    # The narrowing draws documents the server takes: writes and dry-runs succeed, not only 404/409.
    for label in (
        "POST /admin/deploy-schedules",
        "POST /api/v1/cmp/projects/{project}/deploy-schedules",
        "POST /admin/deploy-schedules:dry-run",
        "POST /api/v1/cmp/projects/{project}/deploy-schedules:dry-run",
    ):
        assert STATUSES[label, 200] >= 1, (
            label,
            {k: v for k, v in STATUSES.items() if k[0] == label},
        )
