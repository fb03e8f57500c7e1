"""Contract of the schedule operations: every endpoint, its success and its typed errors."""

from __future__ import annotations

import json

from api_support import ADMIN, Api, alpha_schedule, seed, tenant_base

from gps_dagster.engine.engine import LOCK_NAME

NAME = "gpu-pool-h100-shared"
ONE = f"{ADMIN}/{NAME}"


def one_target(name: str, deploy: str) -> dict:
    return {
        "name": name,
        "timezone": "UTC",
        "targets": [{"model_deploy_id": deploy, "default_state": "running"}],
    }


def test_create_get_replace_delete_carry_the_version_as_etag(api: Api) -> None:
    created = api.call("admin", "POST", ADMIN, json=seed())
    assert created.status_code == 201, created.text
    assert created.headers["ETag"] == '"1"' and created.headers["Location"] == ONE
    assert created.json()["document"]["windows"][1]["name"] == "maint-wed"
    got = api.call("admin", "GET", ONE)
    assert (
        got.status_code == 200 and got.headers["ETag"] == '"1"' and got.json()["scope"] == "admin"
    )
    doc = seed()
    doc["windows"][0]["priority"] = 20
    replaced = api.call("admin", "PUT", ONE, json=doc, headers={"If-Match": '"1"'})
    assert replaced.status_code == 200 and replaced.json()["version"] == 2
    assert replaced.headers["ETag"] == '"2"'
    assert api.services.store.get_schedule(NAME).spec.windows[0].priority == 20
    deleted = api.call("admin", "DELETE", ONE, headers={"If-Match": '"2"'})
    assert deleted.status_code == 204
    gone = api.call("admin", "GET", ONE)
    assert gone.status_code == 404 and gone.json()["reason"] == "schedule_not_found"
    assert api.services.store.owner_of("md-llama70b") is None


def test_a_stale_if_match_is_412_and_changes_nothing(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    changed = seed()
    changed["windows"][0]["priority"] = 20
    api.call("admin", "PUT", ONE, json=changed, headers={"If-Match": '"1"'})
    doc = seed()
    doc["windows"][0]["priority"] = 99
    stale = api.call("admin", "PUT", ONE, json=doc, headers={"If-Match": 'W/"1"'})
    assert stale.status_code == 412
    body = stale.json()
    assert body["reason"] == "version_mismatch" and 'If-Match: "2"' in body["fix"]
    assert api.services.store.get_schedule(NAME).version == 2
    assert api.services.store.get_schedule(NAME).spec.windows[0].priority == 20
    assert api.call("admin", "DELETE", ONE, headers={"If-Match": '"1"'}).status_code == 412
    bad = api.call("admin", "PUT", ONE, json=seed(), headers={"If-Match": "yesterday"})
    assert bad.status_code == 400 and bad.json()["reason"] == "invalid_if_match"


def test_create_of_an_existing_name_is_409_and_replace_of_a_missing_one_404(api: Api) -> None:
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    again = api.call("admin", "POST", ADMIN, json=seed())
    assert again.status_code == 409 and again.json()["reason"] == "schedule_exists"
    missing = api.call("admin", "PUT", f"{ADMIN}/nope", json=one_target("nope", "md-bge-embed"))
    assert missing.status_code == 404 and missing.json()["reason"] == "schedule_not_found"
    assert api.services.store.find_schedule("nope") is None


def test_list_pages_by_name(api: Api) -> None:
    for name, deploy in (
        ("c-sched", "md-bge-embed"),
        ("a-sched", "md-llama70b"),
        ("b-sched", "md-qwen32b"),
    ):
        assert api.call("admin", "POST", ADMIN, json=one_target(name, deploy)).status_code == 201
    first = api.call("admin", "GET", ADMIN, params={"limit": 2}).json()
    assert [s["name"] for s in first["items"]] == ["a-sched", "b-sched"]
    assert first["next_page_token"] == "b-sched"
    rest = api.call(
        "admin", "GET", ADMIN, params={"limit": 2, "page_token": first["next_page_token"]}
    ).json()
    assert [s["name"] for s in rest["items"]] == ["c-sched"] and rest["next_page_token"] is None


def test_an_invalid_document_is_422_with_every_field_problem_and_nothing_is_written(
    api: Api,
) -> None:
    doc = seed()
    doc["windows"][0]["states"][0]["replicas"] = 0
    doc["windows"][0]["cron"] = "61 8 * * *"
    answer = api.call("admin", "POST", ADMIN, json=doc)
    assert answer.status_code == 422
    body = answer.json()
    assert body["reason"] == "invalid_document"
    problems = {(e["path"], e["reason"]) for e in body["errors"]}
    assert ("windows[0].states[0].replicas", "replicas_zero") in problems
    assert any(p == "windows[0].cron" for p, _ in problems)
    assert all(e["fix"] for e in body["errors"])
    assert api.services.store.list_schedules() == []
    assert "Traceback" not in answer.text


def test_malformed_json_is_400(api: Api) -> None:
    answer = api.call(
        "admin", "POST", ADMIN, content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400 and answer.json()["reason"] == "invalid_json"


def test_target_owned_is_409_naming_the_owner_and_the_field(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    thief = seed()
    thief["name"] = "thief"
    answer = api.call("admin", "POST", ADMIN, json=thief)
    assert answer.status_code == 409
    body = answer.json()
    assert body["reason"] == "target_owned" and NAME in body["message"]
    assert body["path"] == "targets[0].model_deploy_id"
    assert api.services.store.find_schedule("thief") is None


def test_an_admin_schedule_may_not_target_a_cmp_deploy(api: Api) -> None:
    answer = api.call("admin", "POST", ADMIN, json=one_target("grab", "alpha-chat"))
    assert answer.status_code == 422
    error = answer.json()["errors"][0]
    assert (error["path"], error["reason"]) == ("targets[0].model_deploy_id", "cmp_managed")
    assert "/api/v1/cmp/projects/alpha/deploy-schedules" in error["fix"]


def test_a_body_scope_other_than_the_surface_is_refused(api: Api) -> None:
    doc = seed()
    doc["scope"] = "cmp:alpha"
    answer = api.call("admin", "POST", ADMIN, json=doc)
    assert answer.status_code == 422 and answer.json()["errors"][0]["reason"] == "scope_mismatch"
    renamed = api.call("admin", "POST", ADMIN, json=seed())
    assert renamed.status_code == 201
    other = seed()
    other["name"] = "other-name"
    mismatch = api.call("admin", "PUT", ONE, json=other)
    assert mismatch.status_code == 422 and mismatch.json()["errors"][0]["reason"] == "name_mismatch"


def test_tenant_placement_fields_are_dropped_and_reported(api: Api) -> None:
    doc = alpha_schedule()
    doc["queue"] = "root.fast"
    doc["targets"][0]["node_name"] = "hgx-01"
    doc["windows"][0]["states"][0]["queue"] = "x"
    answer = api.call("alpha", "POST", tenant_base("alpha"), json=doc)
    assert answer.status_code == 201, answer.text
    paths = {w["path"] for w in answer.json()["warnings"]}
    assert paths == {"queue", "targets[0].node_name", "windows[0].states[0].queue"}
    stored = api.services.store.get_schedule("alpha/alpha-swap")
    assert stored.spec.scope == "cmp:alpha"
    assert "node_name" not in json.dumps(stored.spec.to_document())
    admin_doc = seed()
    admin_doc["queue"] = (
        "root.fast"  # the admin surface drops nothing: an unknown field is an error
    )
    assert api.call("admin", "POST", ADMIN, json=admin_doc).status_code == 422


def test_a_tenant_may_target_its_own_endpoint_but_not_an_unknown_or_foreign_deploy(
    api: Api,
) -> None:
    doc = alpha_schedule("alpha-ep")
    doc["targets"] = [{"model_deploy_id": "alpha-ep", "default_state": "running"}]
    doc["windows"] = []
    assert api.call("alpha", "POST", tenant_base("alpha"), json=doc).status_code == 201
    answers = []
    for deploy in ("beta-chat", "no-such-deploy"):
        bad = alpha_schedule(f"try-{deploy}")
        bad["targets"][1]["model_deploy_id"] = deploy
        bad["windows"][0]["states"][1]["model_deploy_id"] = deploy
        answer = api.call("alpha", "POST", tenant_base("alpha"), json=bad)
        assert answer.status_code == 422
        answers.append({k: v for k, v in answer.json()["errors"][0].items()})
    foreign, unknown = answers
    assert foreign["reason"] == unknown["reason"] == "unknown_deploy"
    assert foreign["fix"].replace("beta-chat", "X") == unknown["fix"].replace("no-such-deploy", "X")


def test_apply_now_runs_a_pass_and_is_audited(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    api.services.store.set_gate("enforce", now=api.clock.now())
    answer = api.call("admin", "POST", f"{ONE}:apply-now")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["gate"] == "enforce" and body["schedules"][0]["opened"] == 1
    assert {s["target"] for s in body["steps"]} >= {"md-qwen32b"}
    audit = api.call("admin", "GET", "/admin/audit", params={"name": NAME}).json()["items"]
    assert [(a["action"], a["version"]) for a in audit] == [
        ("schedule_created", 1),
        ("apply_now", 1),
    ]
    assert audit[1]["actor"].startswith("token:admin(")


def test_apply_now_answers_409_busy_while_another_pass_holds_the_lock(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    with api.services.store.lock(LOCK_NAME, holder="another-engine", now=api.clock.now()) as held:
        assert held.acquired
        answer = api.call("admin", "POST", f"{ONE}:apply-now")
    assert answer.status_code == 409
    assert answer.json()["reason"] == "busy" and answer.headers["Retry-After"] == "5"


def test_apply_now_is_rate_limited_per_schedule_on_the_injected_clock(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    api.call("alpha", "POST", tenant_base("alpha"), json=alpha_schedule())
    codes = [api.call("admin", "POST", f"{ONE}:apply-now").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    limited = api.call("admin", "POST", f"{ONE}:apply-now")
    assert limited.json()["reason"] == "rate_limited" and int(limited.headers["Retry-After"]) >= 1
    assert "apply-now per minute" in limited.json()["fix"]
    other = api.call("alpha", "POST", f"{tenant_base('alpha')}/alpha-swap:apply-now")
    assert other.status_code == 200  # the bucket is per schedule
    api.clock.advance(10)
    assert api.call("admin", "POST", f"{ONE}:apply-now").status_code == 200
    assert api.call("admin", "POST", f"{ONE}:apply-now").status_code == 429


def test_dry_run_at_an_instant_over_a_range_and_of_an_unsaved_edit(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    at = api.call(
        "admin", "POST", f"{ONE}:dry-run", json={"at": "2026-10-21T14:00:00+07:00"}
    ).json()
    assert at["version"] == 1
    assert at["instant"]["intents"]["md-llama70b"]["source"] == "maint-wed"
    assert at["instant"]["intents"]["md-qwen32b"]["desired_state"] == "running"
    span = api.call(
        "admin",
        "POST",
        f"{ONE}:dry-run",
        json={"from": "2026-10-21T00:00:00+07:00", "to": "2026-10-22T00:00:00+07:00"},
    ).json()
    assert [b["at"] for b in span["boundaries"]] == [
        "2026-10-21T08:00:00+07:00",
        "2026-10-21T13:00:00+07:00",
        "2026-10-21T15:00:00+07:00",
        "2026-10-21T18:00:00+07:00",
    ]
    eight = span["boundaries"][0]["steps"]
    assert [(s["target"], s["step"]) for s in eight] == [
        ("md-qwen32b", "stop"),
        ("md-llama70b", "start"),
    ]
    edit = seed()
    edit["windows"] = edit["windows"][:1]  # drop maint-wed
    unsaved = api.call(
        "admin",
        "POST",
        f"{ONE}:dry-run",
        json={"at": "2026-10-21T14:00:00+07:00", "schedule": edit},
    )
    assert unsaved.json()["version"] is None
    assert unsaved.json()["instant"]["intents"]["md-llama70b"]["source"] == "business-hours"
    assert api.services.store.get_schedule(NAME).version == 1  # a dry-run writes nothing
    fresh = one_target("fresh", "md-bge-embed")
    new = api.call(
        "admin",
        "POST",
        f"{ADMIN}:dry-run",
        json={"at": "2026-10-21T14:00:00+07:00", "schedule": fresh},
    )
    assert new.status_code == 200 and new.json()["schedule"] == "fresh"
    assert api.services.store.find_schedule("fresh") is None


def test_dry_run_refuses_an_ambiguous_or_incomplete_request(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    both = api.call(
        "admin",
        "POST",
        f"{ONE}:dry-run",
        json={"at": "2026-10-21T14:00:00+07:00", "from": "2026-10-21T00:00:00+07:00"},
    )
    assert both.status_code == 422 and both.json()["reason"] == "ambiguous_request"
    half = api.call("admin", "POST", f"{ONE}:dry-run", json={"from": "2026-10-21T00:00:00+07:00"})
    assert half.json()["reason"] == "incomplete_range"
    naive = api.call("admin", "POST", f"{ONE}:dry-run", json={"at": "2026-10-21T14:00:00"})
    assert naive.status_code == 422 and naive.json()["errors"][0]["path"] == "at"
    assert (
        api.call("admin", "POST", f"{ADMIN}:dry-run", json={}).json()["reason"]
        == "missing_schedule"
    )


def test_status_lists_every_target_with_the_gate(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    api.services.store.set_gate("enforce", now=api.clock.now())
    api.call("admin", "POST", f"{ONE}:apply-now")
    body = api.call("admin", "GET", f"{ONE}/status").json()
    assert body["gate"] == "enforce" and body["version"] == 1
    phases = {t["target"]: t for t in body["targets"]}
    assert set(phases) == {"md-llama70b", "md-qwen32b"}
    assert phases["md-qwen32b"]["last_action"]["step"] == "stop"


def test_timeline_has_windows_intervals_and_the_gpu_line(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    body = api.call(
        "admin",
        "GET",
        f"{ONE}/timeline",
        params={"from": "2026-10-19T00:00:00+07:00", "to": "2026-10-26T00:00:00+07:00"},
    ).json()
    windows = {w["name"]: w for w in body["windows"]}
    assert windows["maint-wed"]["priority"] == 100 and windows["maint-wed"]["kind"] == "one_shot"
    assert len(windows["business-hours"]["occurrences"]) == 5
    wed = [i for i in body["targets"]["md-llama70b"] if i["start"] == "2026-10-21T13:00:00+07:00"]
    assert wed and wed[0]["source"] == "maint-wed" and wed[0]["desired_state"] == "stopped"
    # A 8 + C 2 + alpha-batch 2 (running, in no admin schedule) of 18 GPUs
    assert max(g["desired_gpus"] for g in body["gpu"]) == 12 and body["gpu"][0]["capacity"] == 18
    week = api.call(
        "admin", "GET", f"{ONE}/timeline"
    ).json()  # default: the clock's week, Monday first
    assert (week["from"], week["to"]) == ("2026-10-19T00:00:00+07:00", "2026-10-26T00:00:00+07:00")
    spaced = api.call(
        "admin",
        "GET",
        f"{ONE}/timeline?from=2026-10-19T00:00:00+07:00&to=2026-10-20T00:00:00+07:00",
    )
    assert spaced.status_code == 200 and spaced.json()["to"] == "2026-10-20T00:00:00+07:00"


def test_timeline_range_errors_are_400_with_a_fix(api: Api) -> None:
    api.call("admin", "POST", ADMIN, json=seed())
    cases = {
        "invalid_instant": {"from": "monday"},
        "empty_range": {"from": "2026-10-20T00:00:00+07:00", "to": "2026-10-19T00:00:00+07:00"},
        "range_too_long": {"from": "2026-01-01T00:00:00+07:00", "to": "2026-12-01T00:00:00+07:00"},
    }
    for reason, params in cases.items():
        answer = api.call("admin", "GET", f"{ONE}/timeline", params=params)
        assert (answer.status_code, answer.json()["reason"]) == (400, reason)
        assert answer.json()["fix"]
