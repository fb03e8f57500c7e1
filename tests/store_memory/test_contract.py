"""The store contract: the store tests that use only the engine's Protocol, on ``sql`` and
   ``memory``.

Every ``db_url`` test of the modules below runs twice here, once on the SQL store (SQLite)
and once on ``MemoryStore``, with its own body and assertions (``contract.py``). The ones
that cannot run on memory are listed in ``EXCLUDED`` with the reason; they still run on
SQLite and PostgreSQL where they live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine import (
    test_atomic_endings,
    test_claim_pins,
    test_clock_skew,
    test_crash_safety,
    test_cursor_position,
    test_due_index,
    test_mutation_guards,
    test_retention,
    test_store,
    test_store_edges,
    test_store_gate,
)
from tests.store_memory.contract import Stores, adopt, memory_url, patch_modules

MODULES = [
    test_store,
    test_store_edges,
    test_store_gate,
    test_due_index,
    test_retention,
    test_atomic_endings,
    test_claim_pins,
    test_clock_skew,
    test_crash_safety,
    test_cursor_position,
    test_mutation_guards,
]
SQL = "writes or reads the SQL tables through store.engine"
EXCLUDED: dict[str, str] = {
    "test_store::test_pass_lock_is_exclusive_and_a_lease_expires": (
        "picks the lease branch by is_postgres(store.engine); the memory lease (SQLite's) has its "
        "own case in test_memory_store.py"
    ),
    "test_store::test_migrations_are_idempotent": "Alembic migrations are the SQL store's",
    "test_store_edges::test_2_12_an_unreadable_gate_fails_closed_with_a_log_and_an_event": (
        f"{SQL} (an unreadable gate row); the memory gate reads a dict"
    ),
    "test_store_gate::test_set_gate_writes_the_value_and_its_event_in_one_transaction": (
        "fails the event INSERT with a SQLAlchemy listener; the memory rollback has its own case"
    ),
    "test_retention::test_prune_deletes_only_finished_unnamed_history_and_no_counter_moves": (
        f"{SQL} (plans inserted 40 days old); memory retention has its own case"
    ),
    (
        "test_retention::"
        "test_recent_history_and_the_current_plan_are_kept_even_with_a_zero_retention"
    ): f"{SQL} (counts rows per table)",
    "test_retention::test_the_loop_prunes_on_its_own_once_per_interval": (
        f"{SQL} (plans inserted old)"
    ),
    "test_claim_pins::test_migration_0009_keeps_the_claims_of_an_older_database_unpinned": (
        "a migration of the SQL schema"
    ),
    (
        "test_claim_pins::"
        "test_a_pin_is_written_once_and_another_object_seen_later_does_not_replace_it"
    ): f"{SQL} (reads target_claims.pinned_at)",
    "test_claim_pins::test_a_reclaim_forgets_the_pin_with_an_event_and_an_audit_row": (
        f"{SQL} (reads target_claims)"
    ),
    "test_claim_pins::test_a_dropped_target_loses_its_pin_with_its_claim": (
        f"{SQL} (reads target_claims)"
    ),
    "test_cursor_position::test_a_due_schedule_on_the_last_page_is_served_at_its_boundary": (
        "builds its SimPool on store.engine"
    ),
    (
        "test_cursor_position::"
        "test_a_sweep_asked_to_stop_leaves_the_cursor_on_the_last_schedule_visited"
    ): "builds its SimPool on store.engine",
    (
        "test_mutation_guards::"
        "test_4_fence_claim_recheck_a_step_whose_target_was_claimed_away_is_not_submitted"
    ): f"{SQL} (the race is a raw UPDATE); the memory fence re-checks have their own case",
    (
        "test_mutation_guards::"
        "test_4_fence_enabled_recheck_a_disable_racing_the_fence_submits_nothing"
    ): f"{SQL} (the race is a raw UPDATE); the memory fence re-checks have their own case",
}


@pytest.fixture(params=["sql", "memory"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "sql":
        return str(request.getfixturevalue("sqlite_url"))
    patch_modules(monkeypatch, MODULES, Stores(), tmp_path)
    return memory_url(tmp_path)


adopt(globals(), MODULES, EXCLUDED)


def test_every_exclusion_names_a_db_url_test_of_the_contract_modules() -> None:
    found = {
        f"{m.__name__.rsplit('.', 1)[1]}::{n}"
        for m in MODULES
        for n in vars(m)
        if n.startswith("test_")
    }
    assert set(EXCLUDED) <= found
    assert all(reason.strip() for reason in EXCLUDED.values())
