"""The one reviewed list of Core contract cases the real-node harness does not run, with the reason
for each (deselected for its parametrisation only, never skipped; ``test_real_node_exclusions``).

The real node is ONE node of 4 GPUs whose kubelet keeps its own time. Each case below loads a
pool that cannot be laid out on it (``tests/k8s/real_harness.fit_problems`` says why, and the
test checks it still does); shrinking those pools would change what the case proves for every
adapter, so the real node runs the one-node cases of ``test_core_one_node.py`` instead.
A reason starts with the pool the case loads."""

# Decisions embodied here (docs/decisions.md):
# * “The contract suite on the real node: what fits one node”

from __future__ import annotations

import pytest

REAL_NODE = ("real-node", "postgres")
_SEED10 = (
    "seed10: two nodes (hgx-02 pins C), an 8-GPU A and a 6-GPU B, and a 60 s publish lag the "
    "kubelet does not have; its times (29 s still terminating, 1 s later gone) are virtual instants"
)
_SPLIT16 = (
    "split16: three 8-GPU nodes whose running deploys alone take 16 GPUs; the per-node split "
    "(4 + 4) and a 2-node group (LeaderWorkerSet) are its point, and a 60 s publish lag"
)
_ACCOUNTS = (
    "accounts: two 8-GPU nodes and 14 GPUs of deploys (a 6-GPU quota with 4 running plus a 4-GPU "
    "request): the quota arithmetic needs more GPUs than the node has, and a 60 s publish lag"
)
_RESERVED = (
    "reserved: an 8-GPU node whose GPUs 0-4 are reserved by UUID (the pool's UUIDs, not the "
    "device plugin's), plus 3 unbound GPUs; the real node's witness and reservations are tested "
    "end to end in tests/k8s/test_real_node.py"
)
REAL_NODE_EXCLUDED: dict[str, str] = {
    "test_core_admission.py::test_quota_counts_running_project_gpus_plus_the_request": _ACCOUNTS,
    "test_core_admission.py::test_admin_deploys_have_no_project_quota": _ACCOUNTS,
    "test_core_admission.py::test_unpaid_billing_is_refused_in_preflight_and_on_start": _ACCOUNTS,
    "test_core_admission.py::test_stopping_an_aliased_deploy_needs_typed_consent": _SEED10,
    "test_core_admission.py::test_alias_guard_reads_aliases": _SEED10,
    "test_core_admission.py::test_alias_guard_failure_is_an_error_never_no_alias": _SEED10,
    "test_core_admission.py::test_scaling_is_refused_for_kinds_that_cannot_scale": _ACCOUNTS,
    "test_core_admission.py::test_cmp_endpoint_lists_its_members": _ACCOUNTS,
    "test_core_capacity.py::test_capacity_appears_only_after_the_publish_lag": _SEED10,
    "test_core_capacity.py::test_preview_fits_per_node_not_in_total": _SPLIT16,
    "test_core_capacity.py::test_preview_is_read_only": _SPLIT16,
    "test_core_capacity.py::test_a_multi_node_group_never_spans_more_nodes_than_declared": _SPLIT16,
    "test_core_capacity.py::test_an_unplaceable_start_stays_pending_and_unschedulable": _SPLIT16,
    "test_core_capacity.py::test_a_pending_group_is_placed_when_capacity_is_published": _SPLIT16,
    "test_core_capacity.py::test_an_intruder_grabs_published_gpus": _SEED10,
    "test_core_capacity.py::test_a_static_foreign_workload_holds_gpus_until_removed": _SPLIT16,
    "test_core_faults.py::test_fail_next_fails_one_call_without_mutating": _SEED10,
    "test_core_faults.py::test_fail_next_can_be_permanent_and_hit_reads": _SEED10,
    "test_core_faults.py::test_lost_response_is_applied_once_and_replay_returns_the_operation": (
        _SEED10
    ),
    "test_core_faults.py::test_crash_before_commit_applies_nothing": _SEED10,
    "test_core_faults.py::test_crash_after_commit_applies_once": _SEED10,
    "test_core_faults.py::test_crash_before_mutation": _SEED10,
    "test_core_faults.py::test_unschedulable_pods_never_place": _SPLIT16,
    "test_core_faults.py::test_never_ready_places_but_never_becomes_ready": _SPLIT16,
    "test_core_faults.py::test_a_broken_cmp_member_fails_its_start": _ACCOUNTS,
    "test_core_faults.py::test_a_broken_cmp_member_fails_its_stop": _ACCOUNTS,
    "test_core_faults.py::test_forced_failed_or_deleting_state": _SPLIT16,
    "test_core_mutations.py::test_get_deploy_reports_the_declared_deploy": _SEED10,
    "test_core_mutations.py::test_replayed_key_returns_the_same_operation_and_mutates_once": (
        _SEED10
    ),
    "test_core_mutations.py::test_a_key_reused_for_another_call_is_refused": _SEED10,
    "test_core_mutations.py::test_stale_etag_is_refused_with_412": _SEED10,
    "test_core_mutations.py::test_another_deploys_etag_is_refused": _SEED10,
    "test_core_mutations.py::test_stop_converges_only_after_terminating_pods_are_gone": _SEED10,
    "test_core_mutations.py::test_start_becomes_ready_after_the_start_delay": _SPLIT16,
    "test_core_mutations.py::test_replica_intent_on_a_stopped_deploy_only_persists": _SPLIT16,
    "test_core_mutations.py::test_scale_down_releases_one_group_and_up_adds_one": _SPLIT16,
    "test_core_mutations.py::test_start_on_a_running_deploy_changes_nothing": _SEED10,
    "test_core_mutations.py::test_unknown_operation_is_not_found": _SEED10,
    "test_core_mutations.py::test_a_later_operation_supersedes_an_unfinished_one": _SPLIT16,
    "test_core_reservations.py::test_admission_preview_agrees_with_start_and_changes_nothing": (
        _RESERVED
    ),
    (
        "test_core_reservations.py::"
        "test_a_bound_deploy_reports_its_binding_and_is_witnessed_when_ready"
    ): _RESERVED,
    "test_core_reservations.py::test_unbound_work_stays_off_reserved_gpus": _RESERVED,
    "test_core_reservations.py::test_reservation_deploys_lists_the_bound_deploys": _RESERVED,
}
"""Contract case (file::function) -> why the real node does not run it. Deselected, never
skipped."""


def excluded_on_real_node(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("harness") != REAL_NODE:
        return False
    name = getattr(item, "originalname", item.name)
    return f"{item.path.name}::{name}" in REAL_NODE_EXCLUDED
