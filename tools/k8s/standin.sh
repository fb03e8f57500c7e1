# The model-server stand-in (issue 19): what the kubelet sees of a model server, nothing more.
# Serves HTTP on $PORT (default 8000) from $STATE_DIR (default /tmp/standin, an emptyDir under a
# read-only root FS): GET /healthz is 200 at once; GET /ready is 200 only after $LOAD_S seconds
# (a readiness probe's target) and 404 again while draining. On SIGTERM it drains for $DRAIN_S
# seconds, then exits 0. With $CRASH_AFTER_S set it exits 3 after that many seconds (a crash loop).
# Run by static busybox: every tool is called as `busybox TOOL` (no applet links in the image).
BB=/bin/busybox
PORT="${PORT:-8000}"
DIR="${STATE_DIR:-/tmp/standin}"
$BB mkdir -p "$DIR" || { echo "standin: cannot create $DIR (mount an emptyDir on /tmp)" >&2; exit 2; }
$BB rm -f "$DIR/ready"
echo ok >"$DIR/healthz"
$BB httpd -f -p "$PORT" -h "$DIR" &
HTTPD=$!
draining=0
trap 'draining=1' TERM INT
echo "standin: serving on :$PORT, ready in ${LOAD_S:-0} s"
t=0
while [ "$draining" = 0 ]; do
  if [ -n "${CRASH_AFTER_S:-}" ] && [ "$t" -ge "$CRASH_AFTER_S" ]; then
    echo "standin: crashing on purpose after ${t} s" >&2
    $BB kill "$HTTPD" 2>/dev/null
    exit 3
  fi
  if [ "$t" -ge "${LOAD_S:-0}" ] && [ ! -f "$DIR/ready" ]; then
    echo ready >"$DIR/ready"
    echo "standin: ready after ${t} s"
  fi
  $BB sleep 1 &
  wait $! 2>/dev/null
  t=$((t + 1))
done
$BB rm -f "$DIR/ready"
echo "standin: SIGTERM, draining for ${DRAIN_S:-0} s"
d=0
while [ "$d" -lt "${DRAIN_S:-0}" ]; do $BB sleep 1; d=$((d + 1)); done
$BB kill "$HTTPD" 2>/dev/null
echo "standin: drained, exiting"
exit 0
