"""Issue 21 item 12: names, scopes and projects end at the end of the text, not before a newline.

``re.match`` with ``$`` accepts ``"vision\\n"``: a shadow project ``vision%0A`` existed.
"""

from __future__ import annotations

import pytest
from api_support import Api, alpha_schedule, tenant_base

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.store.tokens import InvalidScope


def test_a_project_with_a_trailing_newline_is_no_project(api: Api) -> None:
    base = tenant_base("alpha").replace("/alpha/", "/alpha%0A/")
    assert base != tenant_base("alpha")
    shadow = api.call("admin", "GET", base)
    assert shadow.status_code in (400, 404), shadow.text
    made = api.call("admin", "POST", base, json=alpha_schedule())
    assert made.status_code in (400, 404), made.text
    assert [r.name for r in api.services.store.list_schedules()] == []


@pytest.mark.parametrize(
    "field,value", [("scope", "cmp:alpha\n"), ("name", "alpha-swap\n"), ("timezone", "UTC\n")]
)
def test_a_document_value_with_a_trailing_newline_is_refused(field: str, value: str) -> None:
    doc = {
        "name": "n",
        "timezone": "UTC",
        "targets": [{"model_deploy_id": "a", "default_state": "running"}],
        field: value,
    }
    with pytest.raises(SpecInvalid):
        load_schedule(doc)


def test_a_token_scope_with_a_trailing_newline_is_refused(api: Api) -> None:
    with pytest.raises(InvalidScope):
        api.services.tokens.create("nl", "cmp:alpha\n", now=api.clock.now(), actor="t")
