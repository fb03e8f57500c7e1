#!/usr/bin/env sh
# Make sure Debian faketime is on the PATH. Tests of the main run use it too (a Dagster CLI
# backfill checks partition keys against its own now), so `make test` calls this before pytest,
# not only before the faketime re-runs (tools/faketime_tests.sh). Fails loudly if it cannot.
set -eu
command -v faketime >/dev/null 2>&1 && exit 0
SUDO=""
if [ "$(id -u)" != "0" ]; then
  SUDO="sudo"
fi
echo "ensure_faketime: installing Debian faketime" >&2
$SUDO apt-get update -qq || true
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  faketime >/dev/null || true
if ! command -v faketime >/dev/null 2>&1; then
  echo "ensure_faketime: FAILED: faketime is missing and could not be installed" \
    "(apt-get install faketime)" >&2
  exit 1
fi
