"""A database outage: one log line per failed pass, the traceback once at debug (issue 25 #7).

The outage is real: the replica's database stops accepting connections
(``ALLOW_CONNECTIONS false`` and its sessions terminated, as a restarting server refuses them)
while the engine runs passes on its loop; then it comes back. The engine's own loop (injected
clock, a sleeper that advances it) runs in a replica subprocess whose log is read back.
"""

from __future__ import annotations

import multiprocessing
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.engine.outage_worker import outage_replica

PASSES_DOWN = 6
LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def database(url: str) -> str:
    return url.split("?")[0].rsplit("/", 1)[1]


def admin_url(url: str) -> str:
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/postgres" + (f"?{query}" if query else "")


@pytest.mark.postgres
def test_an_outage_logs_one_line_per_failed_pass_and_one_traceback_at_debug(
    pg_url: str, tmp_path: Path
) -> None:
    ctx = multiprocessing.get_context("spawn")
    down, back, done = ctx.Event(), ctx.Event(), ctx.Event()
    log = tmp_path / "replica.log"
    proc = ctx.Process(
        target=outage_replica, args=(pg_url, str(log), PASSES_DOWN, down, back, done)
    )
    proc.start()
    admin = sa.create_engine(admin_url(pg_url), isolation_level="AUTOCOMMIT")
    name = database(pg_url)
    try:
        assert down.wait(timeout=120), "the replica never got going"
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                ),
                {"n": name},
            )
        back.set()  # the replica now runs its passes against the refusing server
        assert done.wait(timeout=120), "the replica's passes during the outage never ended"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
    proc.join(timeout=120)
    assert proc.exitcode == 0
    lines = log.read_text().splitlines()
    begin = lines.index("INFO root OUTAGE BEGIN")
    end = lines.index("INFO root OUTAGE END recovered=True")
    during = lines[begin + 1 : end]
    starts = [i for i, ln in enumerate(during) if LEVEL.match(ln)]
    records = [during[i] for i in starts]
    loud = [ln for ln in records if not ln.startswith("DEBUG")]
    failed = [ln for ln in loud if "engine pass failed" in ln]
    assert len(failed) == PASSES_DOWN, "\n".join(records)
    assert all(
        re.search(r"next try in \d+ s", ln) and "store unavailable" in ln for ln in failed
    ), failed
    assert len(loud) <= PASSES_DOWN + 1, "\n".join(loud)  # + the heartbeat's one warning
    with_traceback = [
        during[i] for i in starts if i + 1 < len(during) and during[i + 1].startswith("Traceback")
    ]
    assert len(with_traceback) == 1, "\n".join(with_traceback)  # once ...
    assert with_traceback[0].startswith("DEBUG"), with_traceback  # ... at debug
