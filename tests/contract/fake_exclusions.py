"""The one reviewed list of Core contract cases ``FakeCore`` does not run, with the reason for each
(deselected for the fake's parametrisation only, never skipped; ``test_fake_core_exclusions``)."""

from __future__ import annotations

import pytest

_NO_RESERVATIONS = (
    "GPU reservations (VRAM budgets, bound placement, holders): FakeCore refuses such pools at load"
)
FAKE_CORE_EXCLUDED: dict[str, str] = {
    "test_core_reservations.py::test_admission_preview_agrees_with_start_and_changes_nothing": (
        _NO_RESERVATIONS
    ),
    (
        "test_core_reservations.py::"
        "test_a_bound_deploy_reports_its_binding_and_is_witnessed_when_ready"
    ): _NO_RESERVATIONS,
    "test_core_reservations.py::test_unbound_work_stays_off_reserved_gpus": _NO_RESERVATIONS,
    "test_core_reservations.py::test_reservation_deploys_lists_the_bound_deploys": _NO_RESERVATIONS,
}
"""Contract case (file::function) -> why FakeCore is not run on it. Deselected, never skipped."""


def excluded_on_fake(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("harness") != ("fake", "memory"):
        return False
    name = getattr(item, "originalname", item.name)
    return f"{item.path.name}::{name}" in FAKE_CORE_EXCLUDED
