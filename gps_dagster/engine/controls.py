"""The pass's reads and writes of the store's controls: the execution gate and the paging cursor.

Each has an owner for its errors (R-PASS-15): the database being down is the loop's
(``StoreUnavailable`` goes up: no database, no pass); anything else is decided here. An
unreadable gate fails closed to ``off`` (R-PASS-1) with a ``gate_unreadable`` event; a gate
that cannot be re-read mid-pass counts as unmoved (the fence re-checks it); an unreadable
cursor starts the page from the first schedule and an unwritable one only costs fairness
(R-PASS-3).
"""

from __future__ import annotations

import logging
from typing import Protocol

from gps_dagster.domain.step_state import Gate
from gps_dagster.engine.store_ports import EventLog, ScheduleStore
from gps_dagster.ports import Clock
from gps_dagster.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

__all__ = ["gate_moved", "read_cursor", "read_gate", "write_cursor"]


class _GateStore(ScheduleStore, EventLog, Protocol):
    """The gate's reads and the event an unreadable gate leaves."""


def read_gate(store: _GateStore, clock: Clock, holder: str) -> Gate:
    """The execution gate; unreadable: ``off`` (fail closed), loudly."""
    try:
        return store.get_gate()
    except StoreUnavailable:  # no database, no pass: one line from the loop (R-PASS-15)
        raise
    except Exception as exc:  # unreadable gate: fail closed (R-PASS-1), loudly
        log.error("execution gate unreadable: failing closed (off): %s", exc, exc_info=exc)
        try:
            store.add_event(
                clock.now(),
                None,
                None,
                "gate_unreadable",
                reason=str(getattr(exc, "reason", "") or type(exc).__name__),
                detail={"error": f"{type(exc).__name__}: {exc}", "holder": holder},
            )
        except Exception:
            log.warning("could not record the gate_unreadable event", exc_info=True)
        return Gate.OFF


def gate_moved(store: ScheduleStore, seen: str) -> bool:
    """The gate reads otherwise than ``seen`` now (unreadable: no; the fence re-checks)."""
    try:
        return store.get_gate() != seen
    except StoreUnavailable:
        raise
    except Exception:
        return False


def read_cursor(store: ScheduleStore) -> str | None:
    """The durable cursor (R-PASS-3); unreadable, the page starts from the first schedule."""
    try:
        return store.get_cursor()
    except StoreUnavailable:
        raise
    except Exception as exc:
        log.warning("pass: paging cursor unreadable (%s); starting from the first schedule", exc)
        return None


def write_cursor(store: ScheduleStore, value: str | None, clock: Clock) -> None:
    """Move the cursor; a failure only costs fairness: the same page comes again."""
    try:
        store.set_cursor(value, now=clock.now())
    except StoreUnavailable:
        raise
    except Exception as exc:
        log.warning("pass: could not move the paging cursor (%s)", exc)
