"""The one owner of every exception a step raises (SPEC R-PASS-15, R-PASS-11).

``StepRunner`` hands whatever a step's read, decision or write raised to ``StepOwner.owned``:
``failures.judge`` decides a retry on the step's own clock or a terminal phase, the retry is
recorded as an event (a release not yet submitted starts its clock), and a store that does not
answer leaves the step as it stands, retried when the store answers. ``owned`` never raises.
"""
# Decisions embodied here (docs/decisions.md):
# * “One step executor: a step is a batch of one”

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_plan import RETRY_SINCE
from gps_dagster.domain.step_state import FINISHED, StepState
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.endings import Endings
from gps_dagster.engine.failures import End, Retry, clock_of, judge
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.engine.store_ports import StepStore
from gps_dagster.ports import Clock
from gps_dagster.store.errors import StoreUnavailable
from gps_dagster.store.plans import StepWrite
from gps_dagster.store.records import ActionRow

log = logging.getLogger(__name__)


class StepOwner:
    def __init__(
        self, store: StepStore, clock: Clock, config: EngineConfig, endings: Endings
    ) -> None:
        self.store, self.clock, self.config, self.endings = store, clock, config, endings

    def owned(
        self, exc: Exception, action_id: str, seen: ActionRow | None, *, event: str = "step_retry"
    ) -> StepOutcome:
        """Apply ``judge``'s decision for ``exc`` raised by step ``action_id``; never raises."""
        try:
            return self._own(exc, action_id, seen, event)
        except StoreUnavailable as down:
            return self._unwritable(action_id, seen, down)
        except Exception:
            log.exception("could not record the error of step %s (%s)", action_id, exc)
            state = seen.state if seen is not None else StepState.PENDING
            return StepOutcome(
                action_id, seen.deploy_id if seen else "", state, reason="engine_error"
            )

    def _own(
        self, exc: Exception, action_id: str, seen: ActionRow | None, event: str
    ) -> StepOutcome:
        if isinstance(exc, StoreUnavailable):
            return self._unwritable(action_id, seen, exc)
        a = self.store.get_action(action_id) or seen  # the step may have moved before it raised
        if a is None:
            return StepOutcome(
                action_id, "", StepState.FAILED, reason="unknown_step", fix="check the run config"
            )
        if a.state in FINISHED:
            return self._outcome(a, a.state)
        now = self.clock.now()
        step_clock = clock_of(a, self.config, now=now, opened_at=a.created_at)
        decision = judge(
            exc, step=a, now=now, clock=step_clock, retry_in_s=self.config.pass_interval_s
        )
        _log(exc, a, decision)
        if isinstance(decision, End):
            return self.endings.fail(a, decision.verdict)
        self._note_retry(a, decision, event, now)
        return StepOutcome(a.id, a.deploy_id, a.state, None, decision.reason, decision.message)

    def _note_retry(self, a: ActionRow, decision: Retry, event: str, now: datetime) -> None:
        """An event for every error (R-PASS-11); a release not yet submitted starts its clock."""
        changes: dict[str, Any] = {}
        detail = a.detail or {}
        if a.order == Order.RELEASE and a.state == StepState.PENDING and RETRY_SINCE not in detail:
            changes["detail"] = {**detail, RETRY_SINCE: now.isoformat()}
        deadline = decision.deadline.isoformat() if decision.deadline else None
        ev = {
            "kind": event,
            "reason": decision.reason,
            "detail": {
                "action": a.id,
                "step": a.step,
                "error": decision.message,
                "deadline": deadline,
            },
        }
        self.store.write_each([StepWrite(a.id, (a.state,), changes, events=(ev,))], now=now)

    @staticmethod
    def _unwritable(action_id: str, seen: ActionRow | None, exc: StoreUnavailable) -> StepOutcome:
        log.warning("step %s: %s; retried when the store answers", action_id, exc)
        state = seen.state if seen is not None else StepState.PENDING
        return StepOutcome(
            action_id, seen.deploy_id if seen else "", state, None, exc.reason, exc.fix
        )

    @staticmethod
    def _outcome(a: ActionRow, state: str, *, reason: str | None = None) -> StepOutcome:
        return StepOutcome(a.id, a.deploy_id, state, None, reason or a.reason, a.fix)


def _log(exc: Exception, a: ActionRow, decision: Retry | End) -> None:
    where = f"step {a.id} ({a.schedule} {a.deploy_id} {a.step}, {a.state})"
    if isinstance(decision, End):
        log.warning(
            "%s ends %s (%s): %s", where, decision.verdict.phase.value, decision.verdict.reason, exc
        )
    elif decision.reason == "engine_error":
        log.error("%s: unexpected error, retried until %s", where, decision.deadline, exc_info=exc)
    else:
        log.warning("%s: %s; retried until %s", where, decision.message, decision.deadline)
