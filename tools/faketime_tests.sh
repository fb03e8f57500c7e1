#!/usr/bin/env sh
# Issue 9 §1: the CLI, Dagster and GPS test folders must pass at any instant. After the main
# run, `make test` runs them again under Debian faketime (libfaketime) at two fixed instants:
# one inside the seed's business hours (Tue 2026-10-20 03:00 UTC = 10:00 +07) and one on a
# weekend night (Sat 2026-10-24 20:00 UTC). FAKETIME_DONT_RESET=1 lets the clock run on in child
# processes (xdist workers, CLI and Dagster subprocesses) instead of restarting at the instant.
# tools/faketime_probe.py runs in the same pytest invocation and fails unless the test processes
# and their subprocesses really read the faked instant. faketime is installed when missing
# (root or sudo), like tools/ensure_chromium.sh; the run fails loudly if it cannot be.
#
# usage: sh tools/faketime_tests.sh PYTHON   (PostgreSQL: GPS_TEST_PG_URL, else one is started)
set -eu
PY=${1:?usage: faketime_tests.sh PYTHON}
cd "$(dirname "$0")/.."

if [ -z "${GPS_TEST_PG_URL:-}" ]; then  # one real server, on the real clock, for both instants
  exec "$PY" tools/with_postgres.py -- sh tools/faketime_tests.sh "$PY"
fi

if ! command -v faketime >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
  fi
  echo "faketime_tests: installing Debian faketime" >&2
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    faketime >/dev/null || true
fi
if ! command -v faketime >/dev/null 2>&1; then
  echo "faketime_tests: FAILED: faketime is missing and could not be installed" \
    "(apt-get install faketime)" >&2
  exit 1
fi

for at in "2026-10-20 03:00:00" "2026-10-24 20:00:00"; do
  started=$(date +%s)
  echo "faketime_tests: tests/cli tests/dagster tests/gps at $at UTC"
  GPS_FAKETIME_AT="$at" FAKETIME_DONT_RESET=1 faketime -f "@$at" \
    "$PY" -m pytest -q -n 2 --dist loadfile -p no:cacheprovider \
    tests/cli tests/dagster tests/gps tools/faketime_probe.py
  echo "faketime_tests: $at UTC passed in $(( $(date +%s) - started )) s"
done
