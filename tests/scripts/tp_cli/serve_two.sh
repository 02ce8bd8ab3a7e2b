#!/bin/sh
# Run by tp_cli/check.cmake: `strata serve` as two rank processes answers a greedy completion
# with the same text as one process at --tp-size 1; SIGINT on rank 0 stops the follower (0).
# Usage: serve_two.sh STRATA MODEL_DIR MASTER_PORT WORK_DIR
set -u
STRATA=$1 MODEL=$2 PORT=$3 WORK=$4
BODY='{"prompt":[5,17,300,2,9],"max_tokens":12,"temperature":0,"ignore_eos":true}'
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
fail() { echo "serve_two: $*" >&2; for f in "$WORK"/s*.log; do echo "== $f" >&2; cat "$f" >&2; done; exit 1; }

# Starts `strata serve ARGS` logging to $1, waits until it is ready, prints its HTTP port.
start() {
  log=$1; shift
  "$STRATA" serve --model "$MODEL" --port 0 --set backend.threads=1 "$@" >"$log" 2>&1 &
  pids="$pids $!"
  echo $! >"$log.pid"
}
wait_ready() {
  for _ in $(seq 150); do
    grep -q "model loaded, ready" "$1" && break
    sleep 0.2
  done
  grep -q "model loaded, ready" "$1" || fail "$1 never became ready"
  sed -n 's/.*listening on [^:]*:\([0-9]*\).*/\1/p' "$1" | head -n 1
}
text_of() {
  curl -s --max-time 30 "http://127.0.0.1:$1/v1/completions" -H 'content-type: application/json' \
    -d "$BODY" | sed -n 's/.*"text":"\(.*\)","logprobs".*/\1/p'
}

start "$WORK/s1.log"
p1=$(wait_ready "$WORK/s1.log")
t1=$(text_of "$p1")
kill -INT "$(cat "$WORK/s1.log.pid")"

start "$WORK/s_r0.log" --tp-size 2 --tp-rank 0 --tp-master "127.0.0.1:$PORT" --tp-timeout 30
start "$WORK/s_r1.log" --tp-size 2 --tp-rank 1 --tp-master "127.0.0.1:$PORT" --tp-timeout 30
r1=$(cat "$WORK/s_r1.log.pid")
p2=$(wait_ready "$WORK/s_r0.log")
t2=$(text_of "$p2")
[ -n "$t1" ] || fail "no text at --tp-size 1"
[ "$t1" = "$t2" ] || fail "texts differ: [$t1] vs [$t2]"
grep -q "listening" "$WORK/s_r1.log" && fail "the follower started an HTTP server"
kill -INT "$(cat "$WORK/s_r0.log.pid")"
for _ in $(seq 100); do kill -0 "$r1" 2>/dev/null || break; sleep 0.1; done
kill -0 "$r1" 2>/dev/null && fail "the follower did not stop with rank 0"
wait "$r1"
rc=$?
[ "$rc" -eq 0 ] || fail "follower exit code $rc"
grep -q "rank 0 stopped the group after" "$WORK/s_r1.log" || fail "no stop message"
echo "serve_two: two-process completion equals tp 1: [$t2]"
