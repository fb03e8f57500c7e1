"""Property-based tests of every operation of the served OpenAPI document (schemathesis).

Schemathesis generates requests from ``/openapi.json`` and calls the app in process through
its ASGI transport (no socket, bounded time). Every response must be no 5xx and must match the
documented status codes, content type, headers and schema. Cases run with an admin token, so the
generated bodies reach the operations instead of stopping at 401; a bounded, derandomised
number of examples per operation keeps the run reproducible and its time bounded
(≥ 1,000 cases in all, counted by the last test of this file).
"""

from __future__ import annotations

import tempfile
from collections import Counter

import pytest
import schemathesis
from api_support import make_api, seed
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

_DIR = tempfile.TemporaryDirectory(prefix="gps-schemathesis-")
API = make_api(f"sqlite:///{_DIR.name}/schemathesis.sqlite")
API.call("admin", "POST", "/admin/deploy-schedules", json=seed())
schema = schemathesis.openapi.from_asgi("/openapi.json", API.client.app)
OPERATIONS = {op.ok().label: op.ok() for op in schema.get_all_operations()}
CASES: Counter[str] = Counter()
EXAMPLES = 45


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_operation_matches_its_documented_contract(label: str) -> None:
    operation = OPERATIONS[label]

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        CASES[label] += 1
        API.clock.advance(20)  # apply-now's rate limit refills on the virtual clock, never the wall clock
        # Schedule and reservation bodies are documented as JSON objects; their cross-field rules
        # (known targets, priorities, one-year overlap checks) are beyond a JSON schema, so a
        # schema-valid body may rightly be refused with 422: that one check does not apply.
        case.call_and_validate(headers=API.as_("admin"), excluded_checks=[positive_data_acceptance])

    check()
    assert CASES[label] >= 1, f"no case generated for {label}"


def test_zz_enough_cases_ran_over_every_operation() -> None:
    assert set(CASES) == set(OPERATIONS), set(OPERATIONS) - set(CASES)
    assert len(OPERATIONS) >= 30
    print(f"schemathesis: {sum(CASES.values())} cases over {len(CASES)} operations")
    assert sum(CASES.values()) >= 1000, CASES
