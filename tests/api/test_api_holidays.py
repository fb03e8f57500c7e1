"""The schedule API over holiday calendars (R-NEXT-2): field errors, the stored version,
timeline."""

from __future__ import annotations

from api_support import ADMIN, Api, seed

from gps_dagster.domain.calendars import PACKAGE

ONE = f"{ADMIN}/gpu-pool-h100-shared"
WEEK = {"from": "2026-08-31T00:00:00+07:00", "to": "2026-09-07T00:00:00+07:00"}


def test_an_unknown_country_is_refused_by_field_and_nothing_is_stored(api: Api) -> None:
    doc = seed()
    doc["windows"][0]["skip"] = {"holidays": {"country": "ZZ"}}
    answer = api.call("admin", "POST", ADMIN, json=doc)
    assert answer.status_code == 422
    errors = answer.json()["errors"]
    assert [(e["path"], e["reason"]) for e in errors] == [
        ("windows[0].skip.holidays.country", "unknown_country")
    ]
    assert api.call("admin", "GET", ONE).status_code == 404


def test_the_stored_document_names_the_package_and_the_timeline_marks_national_day(
    api: Api,
) -> None:
    doc = seed()
    doc["windows"][0]["skip"] = {"holidays": {"country": "VN"}}
    assert api.call("admin", "POST", ADMIN, json=doc).status_code == 201
    stored = api.call("admin", "GET", ONE).json()
    assert stored["document"]["windows"][0]["skip"]["holidays"]["decided_by"] == PACKAGE
    body = api.call("admin", "GET", f"{ONE}/timeline", params=WEEK).json()
    assert [(k["date"], k["reason"]) for k in body["skipped"]] == [
        ("2026-08-31", "Day off (substituted from 08/22/2026)"),
        ("2026-09-01", "National Day"),
        ("2026-09-02", "National Day"),
    ]
    band = next(w for w in body["windows"] if w["name"] == "business-hours")
    assert [o["start"][:10] for o in band["occurrences"]] == ["2026-09-03", "2026-09-04"]
    assert [o["reason"] for o in band["skipped"]][-1] == "National Day"
