"""Whole replica groups on per-node free slots (SPEC R-PASS-9: no fragmentation)."""

from __future__ import annotations

from collections.abc import Sequence


def groups_fitting(slots: Sequence[int], nodes_per_group: int, cap: int) -> int:
    """Most groups (≤ ``cap``) of ``nodes_per_group`` distinct nodes formable from per-node slots.

    ``slots[i]`` is how many group members node ``i`` can host. ``m`` groups fit iff
    Σ min(slots_i, m) ≥ m · nodes_per_group (a node serves a given group at most once).
    """
    best = 0
    for m in range(1, cap + 1):
        if sum(min(s, m) for s in slots) >= m * nodes_per_group:
            best = m
        else:
            break
    return best
