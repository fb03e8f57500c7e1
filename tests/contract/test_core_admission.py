"""Contract: quota, billing, alias consent and guard, scale support, CMP endpoints."""

from __future__ import annotations

import pytest
from contract_harness import Harness
from contract_pools import accounts, seed10

from gps_dagster.domain.pool import FaultSpec
from gps_dagster.ports import (
    AdmissionRefused,
    AliasGuardUnavailable,
    BillingRefused,
    DeployState,
    QuotaRefused,
    Unsupported,
)


def test_quota_counts_running_project_gpus_plus_the_request(harness: Harness) -> None:
    core = harness.load(accounts())
    ok = core.check_quota("t-small", delta_replicas=1)
    assert (ok.project, ok.quota, ok.used, ok.requested) == ("team", 6, 4, 2)
    with pytest.raises(QuotaRefused) as err:
        core.check_quota("t-big", delta_replicas=1)
    assert (err.value.quota, err.value.used, err.value.requested) == (6, 4, 4)
    big = core.get_deploy("t-big")
    with pytest.raises(QuotaRefused):
        core.start("t-big", etag=big.etag, idempotency_key="k")
    assert core.get_deploy("t-big") == big
    run = core.get_deploy("t-run")
    with pytest.raises(QuotaRefused):
        core.set_replica_intent("t-run", 2, etag=run.etag, idempotency_key="k2")


def test_admin_deploys_have_no_project_quota(harness: Harness) -> None:
    core = harness.load(accounts())
    status = core.check_quota("hpa", delta_replicas=100)
    assert status.project is None and status.quota is None


def test_unpaid_billing_is_refused_in_preflight_and_on_start(harness: Harness) -> None:
    core = harness.load(accounts())
    with pytest.raises(BillingRefused):
        core.check_billing("b-1")
    core.check_billing("t-small")
    b1 = core.get_deploy("b-1")
    with pytest.raises(BillingRefused):
        core.start("b-1", etag=b1.etag, idempotency_key="k")
    assert core.get_deploy("b-1").state is DeployState.STOPPED


def test_stopping_an_aliased_deploy_needs_typed_consent(harness: Harness) -> None:
    core = harness.load(seed10())
    b = core.get_deploy("B")
    core.stop("B", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k0")
    harness.advance(90)
    a = core.get_deploy("A")
    op = core.start("A", etag=a.etag, idempotency_key="k1")
    with pytest.raises(AdmissionRefused) as err:
        core.stop("A", etag=op.etag_after, allow_aliased_downtime=False, idempotency_key="k2")
    assert err.value.reason == "alias_requires_consent"
    core.stop("A", etag=op.etag_after, allow_aliased_downtime=True, idempotency_key="k3")
    assert core.get_deploy("A").state is DeployState.STOPPED


def test_alias_guard_reads_aliases(harness: Harness) -> None:
    core = harness.load(seed10())
    assert core.alias_guard("A").aliases == ("chat-prod",) and core.alias_guard("A").has_alias
    assert not core.alias_guard("B").has_alias


@pytest.mark.parametrize(
    ("effect", "reason"), [("alias_guard_unwired", "unwired"), ("alias_guard_error", "read_error")]
)
def test_alias_guard_failure_is_an_error_never_no_alias(
    harness: Harness, effect: str, reason: str
) -> None:
    core = harness.load(seed10())
    harness.inject(FaultSpec.model_validate({"effect": effect}))
    for deploy in ("A", "B"):
        with pytest.raises(AliasGuardUnavailable) as err:
            core.alias_guard(deploy)
        assert err.value.reason == reason


def test_scaling_is_refused_for_kinds_that_cannot_scale(harness: Harness) -> None:
    core = harness.load(accounts())
    hpa = core.get_deploy("hpa")
    with pytest.raises(Unsupported) as err:
        core.set_replica_intent("hpa", 2, etag=hpa.etag, idempotency_key="k")
    assert err.value.reason == "hpa_managed"
    member = core.get_deploy("ep-a")
    with pytest.raises(Unsupported) as err:
        core.set_replica_intent("ep-a", 2, etag=member.etag, idempotency_key="k2")
    assert err.value.reason == "cmp_endpoint_start_stop_only"


def test_cmp_endpoint_lists_its_members(harness: Harness) -> None:
    core = harness.load(accounts())
    members = core.list_members("ep")
    assert [m.id for m in members] == ["ep-a", "ep-b"]
    assert all(m.cmp_managed and m.endpoint == "ep" and m.project == "team" for m in members)
    from gps_dagster.ports import NotFound

    with pytest.raises(NotFound):
        core.list_members("nope")
