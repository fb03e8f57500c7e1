#!/usr/bin/env sh
# Make sure a headless-capable Chromium is on the PATH for the browser test.
# Debian's `chromium` package is used (Playwright's own browser download is not
# reachable here). Installs only when missing; needs root (or sudo) to install.
set -eu
for exe in chromium chromium-browser google-chrome; do
  if command -v "$exe" >/dev/null 2>&1; then
    exit 0
  fi
done
SUDO=""
if [ "$(id -u)" != "0" ]; then
  SUDO="sudo"
fi
echo "ensure_chromium: installing Debian chromium" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null 2>&1
