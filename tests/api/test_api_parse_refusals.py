"""A request body's parse-level refusals are reported at their paths, with the rest (issue 25 #6).

The body reaches ``load_schedule`` as the mapping FastAPI decoded: a 40-deep list, a 40-digit
integer and NaN (Python's decoder accepts it) are refused at their paths by the same walk a
file goes through (``documents.settle``), beside the document's other field errors: one 422.
"""

from __future__ import annotations

import json

from api_support import ADMIN, Api, seed


def test_a_body_with_parse_level_problems_is_one_422_listing_each_at_its_path(api: Api) -> None:
    doc = seed()
    doc["timezone"] = "Mars/Olympus"
    doc["windows"][0]["priority"] = "@BIG@"
    doc["windows"][1]["duration"] = "@NAN@"
    doc["targets"][0]["default_state"] = "@DEEP@"
    text = json.dumps(doc).replace('"@BIG@"', "9" * 40).replace('"@NAN@"', "NaN")
    text = text.replace('"@DEEP@"', "[" * 40 + "]" * 40)
    answer = api.call(
        "admin", "POST", ADMIN, content=text.encode(), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    found = {(e["path"], e["reason"]) for e in answer.json()["errors"]}
    assert found >= {
        ("targets[0].default_state" + "[0]" * 29, "too_deep"),
        ("windows[0].priority", "number_too_long"),
        ("windows[1].duration", "not_finite"),
        ("timezone", "unknown_timezone"),
    }, found
    assert all(path for path, _ in found)
    assert api.services.store.list_schedules() == []  # nothing stored


def test_a_key_given_twice_in_a_body_is_refused_at_its_path_with_the_rest(api: Api) -> None:
    """FastAPI's decoder keeps the last of two equal keys; the API refuses them as a file is."""
    doc = seed()
    doc["windows"][0]["priority"] = "@TWICE@"
    doc["timezone"] = "Mars/Olympus"
    text = json.dumps(doc).replace('"priority": "@TWICE@"', '"priority": 10, "priority": 20')
    text = text.replace('"targets":', '"mode": "observe", "mode": "enforce", "targets":', 1)
    answer = api.call(
        "admin", "POST", ADMIN, content=text.encode(), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    found = {(e["path"], e["reason"]) for e in answer.json()["errors"]}
    assert found >= {
        ("windows[0].priority", "duplicate_key"),
        ("mode", "duplicate_key"),
        ("timezone", "unknown_timezone"),  # the rest of the document is still validated
    }, found
    assert api.services.store.list_schedules() == []  # nothing stored
    clean = json.dumps(seed())  # the same route without a duplicate: created
    created = api.call(
        "admin", "POST", ADMIN, content=clean.encode(), headers={"Content-Type": "application/json"}
    )
    assert created.status_code == 201, created.text
