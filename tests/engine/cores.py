"""Delegating views of the real simulated pool for faults the pool itself cannot declare.

Each is a plain wrapper: every call goes to the real ``SimPool`` except the
one behaviour it names (a deploy deleted from the control plane, a method
that raises an error the adapters never should). They are named after what
they fake, and nothing else about the pool changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.ports import DeployView, NotFound, Operation, Submission, submit_each


class ProcessCrash(BaseException):
    """The engine process died mid-transaction (nothing may catch it, like a real crash)."""


class DeletedDeploys:
    """The pool after ``delete(deploy_id)``: the control plane no longer knows those deploys."""

    def __init__(self, pool: SimPool) -> None:
        self._pool = pool
        self.gone: set[str] = set()

    def delete(self, deploy_id: str) -> None:
        self.gone.add(deploy_id)

    def _check(self, deploy_id: str) -> None:
        if deploy_id in self.gone:
            raise NotFound(f"deploy {deploy_id} not found")

    def get_deploy(self, deploy_id: str) -> DeployView:
        self._check(deploy_id)
        return self._pool.get_deploy(deploy_id)

    def get_deploys(self, deploy_ids: Sequence[str]) -> dict[str, DeployView]:
        return self._pool.get_deploys([d for d in deploy_ids if d not in self.gone])

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        """A deleted deploy's submission is its NotFound; the others go to the pool's own
        ``submit_many`` together (its transactions of many, as the engine would meet them)."""
        live = [s for s in submissions if s.deploy_id not in self.gone]
        results = iter(self._pool.submit_many(live) if live else [])
        out: list[Operation | Exception] = []
        for s in submissions:
            if s.deploy_id in self.gone:
                out.append(NotFound(f"deploy {s.deploy_id} not found"))
            else:
                out.append(next(results))
        return out

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._pool, name)
        if not callable(real):
            return real

        def call(*args: Any, **kw: Any) -> Any:
            if args and isinstance(args[0], str):
                self._check(args[0])
            return real(*args, **kw)

        return call


class RaisingCore:
    """The pool, but ``method`` (on ``deploy`` if given) raises ``error()`` ``times`` times."""

    def __init__(
        self,
        pool: SimPool,
        method: str,
        error: Callable[[], Exception],
        *,
        deploy: str | None = None,
        times: int = 1_000_000,
    ) -> None:
        self._pool, self._method, self._error, self._deploy = pool, method, error, deploy
        self.left = times
        self.raised = 0

    def submit_many(self, submissions: Sequence[Submission]) -> list[Operation | Exception]:
        return submit_each(self, submissions)  # every call through this wrapper

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._pool, name)
        if name != self._method:
            return real

        def call(*args: Any, **kw: Any) -> Any:
            hit = self._deploy is None or (args and args[0] == self._deploy)
            if hit and self.left > 0:
                self.left -= 1
                self.raised += 1
                raise self._error()
            return real(*args, **kw)

        return call


@contextmanager
def crash_on(engine: sa.engine.Engine, hit: Callable[[str, Any], bool]) -> Iterator[list[str]]:
    """Kill the process (``ProcessCrash``) at the first SQL statement ``hit(statement, params)``
    accepts.

    Database-level, so it crashes the old split writes and the new single transaction alike:
    whatever had committed before stays, the rest is rolled back.
    """
    fired: list[str] = []

    def before(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        if not fired and hit(statement, params):
            fired.append(statement)
            raise ProcessCrash(f"engine died at: {statement.splitlines()[0]}")

    sa.event.listen(engine, "before_cursor_execute", before)
    try:
        yield fired
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)


def status_update_to(phase: str) -> Callable[[str, Any], bool]:
    """Matches the UPDATE of a target status that writes ``phase``."""

    def hit(statement: str, params: Any) -> bool:
        values = params if isinstance(params, dict) else {}
        flat = list(values.values()) if values else list(params or ())
        return (
            statement.lstrip().upper().startswith("UPDATE")
            and "target_status" in statement
            and phase in flat
        )

    return hit
