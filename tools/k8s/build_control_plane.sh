#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler from Debian bookworm's
# kubernetes source package (the only real control plane reachable offline here), once.
# The binaries are cached outside the work tree; a second call is a no-op.
# See docs/kubernetes-backend.md (and FACTS.md) for why the reflect2 patch is mandatory.
set -euo pipefail
CACHE="${GPS_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gps_dagster/k8s}"
BIN="$CACHE/bin"
want="kube-apiserver kube-controller-manager kube-scheduler"
have=1
for b in $want; do [ -x "$BIN/$b" ] || have=0; done
if [ "$have" = 1 ] && command -v etcd >/dev/null; then
  echo "control plane binaries cached in $BIN"
  exit 0
fi
mkdir -p "$CACHE"
# Two runs at once (two worktrees' `make test`) must not build into the same tree together.
exec 9>"$CACHE/.build.lock"
flock 9
have=1
for b in $want; do [ -x "$BIN/$b" ] || have=0; done  # the other run may have built them meanwhile
if [ "$have" = 1 ] && command -v etcd >/dev/null; then
  echo "control plane binaries cached in $BIN"
  exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
src=/etc/apt/sources.list.d/gps-bookworm-src.sources
if [ ! -f "$src" ]; then
  $SUDO tee "$src" >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq golang-go rsync etcd-server golang-github-modern-go-reflect2-dev \
  dpkg-dev openssl >/dev/null
if [ "$have" = 1 ]; then exit 0; fi
mkdir -p "$CACHE/src" "$BIN"
cd "$CACHE/src"
if ! ls -d kubernetes-*/ >/dev/null 2>&1; then
  apt-get source -qq kubernetes >/dev/null
fi
tree=$(ls -d kubernetes-*/ | head -1)
cd "$tree"
# Mandatory: the vendored reflect2 1.0.1 crashes kube-apiserver on Go 1.19 (SIGSEGV on the first
# custom-resource create). Debian's reflect2 1.0.2 fixes it.
rm -f vendor/github.com/modern-go/reflect2/*.go vendor/github.com/modern-go/reflect2/*.s
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go vendor/github.com/modern-go/reflect2/
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.s vendor/github.com/modern-go/reflect2/ 2>/dev/null || true
rm -f vendor/github.com/modern-go/reflect2/*_test.go
start=$(date +%s)
GOPROXY=off CGO_ENABLED=0 make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$CACHE/build.log" 2>&1 \
  || { tail -50 "$CACHE/build.log"; echo "control plane build FAILED (log: $CACHE/build.log)" >&2; exit 1; }
for b in $want; do cp "_output/local/bin/linux/$(go env GOARCH)/$b" "$BIN/$b" 2>/dev/null || cp "_output/bin/$b" "$BIN/$b"; done
echo "control plane built in $(( $(date +%s) - start )) s into $BIN"
