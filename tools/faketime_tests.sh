#!/usr/bin/env sh
# Decisions embodied here (docs/decisions.md):
# * “Third-party clocks get faketime, ours get `GPS_CLOCK`”

# The CLI, Dagster, GPS and golden-replay test folders must pass at any instant. After the main
# run, `make test` runs them again under Debian faketime (libfaketime) at two fixed instants:
# one inside the seed's business hours (Tue 2026-10-20 03:00 UTC = 10:00 +07) and one on a
# weekend night (Sat 2026-10-24 20:00 UTC). FAKETIME_DONT_RESET=1 lets the clock run on in child
# processes (xdist workers, CLI and Dagster subprocesses) instead of restarting at the instant.
# tools/faketime_probe.py runs in the same pytest invocation and fails unless the test processes
# and their subprocesses really read the faked instant. faketime is installed when missing
# (tools/ensure_faketime.sh); the run fails loudly if it cannot be.
#
# usage: sh tools/faketime_tests.sh PYTHON   (PostgreSQL: GPS_TEST_PG_URL, else one is started)
set -eu
PY=${1:?usage: faketime_tests.sh PYTHON}
cd "$(dirname "$0")/.."

if [ -z "${GPS_TEST_PG_URL:-}" ]; then  # one real server, on the real clock, for both instants
  exec "$PY" tools/with_postgres.py -- sh tools/faketime_tests.sh "$PY"
fi

sh tools/ensure_faketime.sh

for at in "2026-10-20 03:00:00" "2026-10-24 20:00:00"; do
  started=$(date +%s)
  echo "faketime_tests: tests/cli tests/dagster tests/gps tests/golden at $at UTC"
  GPS_FAKETIME_AT="$at" FAKETIME_DONT_RESET=1 faketime -f "@$at" \
    "$PY" -m pytest -q -n 2 --dist loadfile -p no:cacheprovider \
    tests/cli tests/dagster tests/gps tests/golden tools/faketime_probe.py
  echo "faketime_tests: $at UTC passed in $(( $(date +%s) - started )) s"
done
