#!/usr/bin/env bash
# Prerequisites of the one real node tools/with_k8s.py starts (issue 19): the kubelet built from
# the control plane's Debian 1.20 source tree (same tree, same Go cache, same lock, same cache
# directory), containerd + runc + CNI plugins + busybox-static from Debian, and two OCI image
# archives built here with buildah (no registry is reachable): the pause image (the tree's
# build/pause/linux/pause.c, static) and the model-server stand-in (static busybox + a script).
# Everything is cached; a second call is a no-op. Run after build_control_plane.sh.
set -euo pipefail
CACHE="${GPS_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gps_dagster/k8s}"
BIN="$CACHE/bin"
IMAGES="$CACHE/images"
HERE="$(cd "$(dirname "$0")" && pwd)"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

need_pkgs=""
command -v containerd >/dev/null || need_pkgs="$need_pkgs containerd"
command -v runc >/dev/null || need_pkgs="$need_pkgs runc"
[ -x /usr/lib/cni/bridge ] || need_pkgs="$need_pkgs containernetworking-plugins"
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx httpd || need_pkgs="$need_pkgs busybox-static"
command -v buildah >/dev/null || need_pkgs="$need_pkgs buildah"
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need_pkgs="$need_pkgs libc6-dev"
command -v gcc >/dev/null || need_pkgs="$need_pkgs gcc"
if [ -n "$need_pkgs" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null \
    || { echo "build_node: apt-get install$need_pkgs failed: install them by hand" >&2; exit 1; }
fi

mkdir -p "$CACHE" "$IMAGES"
# The same lock as the control-plane build: one `make` in the shared tree at a time.
exec 9>"$CACHE/.build.lock"
flock 9
if [ ! -x "$BIN/kubelet" ]; then
  tree=$(ls -d "$CACHE"/src/kubernetes-*/ 2>/dev/null | head -1 || true)
  [ -n "$tree" ] || { echo "build_node: no source tree in $CACHE/src: run tools/k8s/build_control_plane.sh first" >&2; exit 1; }
  cd "$tree"
  start=$(date +%s)
  # CGO_ENABLED=0 as for the control plane: the packages both use come from the Go cache.
  GOPROXY=off CGO_ENABLED=0 make WHAT="cmd/kubelet" >"$CACHE/build-kubelet.log" 2>&1 \
    || { tail -50 "$CACHE/build-kubelet.log"; echo "kubelet build FAILED (log: $CACHE/build-kubelet.log)" >&2; exit 1; }
  cp "_output/local/bin/linux/$(go env GOARCH)/kubelet" "$BIN/kubelet.tmp" 2>/dev/null || cp _output/bin/kubelet "$BIN/kubelet.tmp"
  mv "$BIN/kubelet.tmp" "$BIN/kubelet"
  echo "kubelet built in $(( $(date +%s) - start )) s into $BIN"
else
  echo "kubelet cached in $BIN"
fi

bah() { buildah --storage-driver vfs --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/run" "$@"; }

# pause: the sandbox (infra) container of every pod; its name is the kubelet's
# --pod-infra-container-image and containerd's sandbox_image.
if [ ! -s "$IMAGES/pause.tar" ]; then
  tree=$(ls -d "$CACHE"/src/kubernetes-*/ | head -1)
  work=$(mktemp -d)
  gcc -Os -static -DVERSION=v3.4-gps -o "$work/pause" "$tree/build/pause/linux/pause.c"
  c=$(bah from scratch)
  bah copy "$c" "$work/pause" /pause >/dev/null
  bah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  bah commit -q "$c" localhost/gps/pause:3.4 >/dev/null
  bah rm "$c" >/dev/null
  bah push -q localhost/gps/pause:3.4 "oci-archive:$IMAGES/pause.tar.tmp:localhost/gps/pause:3.4"
  mv "$IMAGES/pause.tar.tmp" "$IMAGES/pause.tar"
  rm -rf "$work"
  echo "pause image built into $IMAGES/pause.tar"
fi

# The model-server stand-in: static busybox (sh, httpd, sleep) and tools/k8s/standin.sh.
sum=$(cat "$HERE/standin.sh" /bin/busybox | sha256sum | cut -c1-16)
if [ ! -s "$IMAGES/standin-$sum.tar" ]; then
  c=$(bah from scratch)
  bah copy "$c" /bin/busybox /bin/busybox >/dev/null
  bah copy "$c" "$HERE/standin.sh" /standin.sh >/dev/null
  bah config --entrypoint '["/bin/busybox", "sh", "/standin.sh"]' --user 10001:10001 "$c"
  bah commit -q "$c" localhost/gps/standin:1 >/dev/null
  bah rm "$c" >/dev/null
  bah push -q localhost/gps/standin:1 "oci-archive:$IMAGES/standin-$sum.tar.tmp:localhost/gps/standin:1"
  mv "$IMAGES/standin-$sum.tar.tmp" "$IMAGES/standin-$sum.tar"
  ln -sf "standin-$sum.tar" "$IMAGES/standin.tar"
  echo "stand-in image built into $IMAGES/standin-$sum.tar"
fi
ln -sf "standin-$sum.tar" "$IMAGES/standin.tar"
