#!/usr/bin/env bash
# The serving benchmark on the GPU machine, as a client sees it (docs/benchmarks.md):
#   .gpu-bundle/bench_serve.sh OUT_DIR       (from a bundle made by tools/gpu/bundle.sh)
# For each configuration (default: configs/bench/llama3-8b-full.yaml, then
# configs/bench/llama3-8b-sparse.yaml = the default sparsity profile) it starts ONE
# `strata serve --port 0` (one start per configuration, not per level), then runs
# `strata bench serve --steady-state` against it at 4000 in / 500 out for each level, one
# invocation per level, and stops the server. Writes into OUT_DIR: <config>-c<N>/report.json
# (+ bench.log) per level, server-<config>.log, report.json / throughput.svg / ttft.svg
# (all levels merged by `strata bench report`), table.txt, status.txt (with each level's GPU
# idle ratio and page-table bytes per step from two /metrics scrapes, also
# <config>-c<N>/gpu_idle.txt, table_bytes_per_step.txt). Exit status 0 only when
# every level ran with no failed request.
#
# Levels: "concurrency:measured prompts" (STRATA_BENCH_LEVELS, default "1:4 16:32 64:128 256:384").
# In steady state each level first sends a ramp-up round of c requests (staggered lengths,
# excluded), then the measured ones as slots free up. Throughput is counted over the steady
# window (tools/bench/bench_stats.h SteadyWindow): from the moment the ramp-up round's prompts
# are all prefilled to the last measured send, every token read in it, ramp-up and measured alike.
# The measured count must outlast the ramp-up's prefill pile (at c = 256 about 28 s of prefill):
# 256:128 did not (bench prints a warning when a level has no steady window).
#
# Time estimate (H200, measured 2026-12-01 with 1:4 16:16 64:64 256:128: full 20/15/34/86 s,
# sparse 21/13/28/64 s per level; server start with random:llama3-8b 2-3 s): the extra measured
# requests add about one E2E period of c more requests at each level (full: c=256 E2E ≈ 44 s,
# ≈ 5.8 requests/s; sparse ≈ 22 s, ≈ 11.6 requests/s):
#   full ≈ 3 + 20 + 21 + 48 + 131 ≈ 225 s, sparse ≈ 3 + 21 + 17 + 38 + 86 ≈ 165 s: ≈ 6.5 minutes.
#   Hard cap STRATA_BENCH_BUDGET_S (default 540 s = 9 min), split evenly between the
#   configurations: a level that would start past its share is skipped (status.txt says so) and
#   a running level is killed at the cap.
#
# Other knobs (for a CPU check with the tiny model, e.g. STRATA_BIN=build/release/bin/strata
# STRATA_BENCH_CONFIG_FILES="a.yaml b.yaml" STRATA_BENCH_INPUT=64 STRATA_BENCH_OUTPUT=16
# STRATA_BENCH_LEVELS="1:2 4:4" STRATA_BENCH_SERVE_ARGS="--model /tmp/tiny"):
#   STRATA_BIN, STRATA_CLIENT_BIN (another binary as the client), STRATA_BENCH_CONFIG_FILES, STRATA_BENCH_INPUT/OUTPUT, STRATA_BENCH_SERVE_ARGS
#   (extra `strata serve` arguments, word-split), STRATA_BENCH_READY_S (server start, default
#   180), STRATA_BENCH_TOKENIZER (default parity/tokenizer.json of the bundle, if present).
set -uo pipefail
out=${1:?usage: bench_serve.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
strata=${STRATA_BIN:-$here/bin/strata}
client=${STRATA_CLIENT_BIN:-$strata}  # the `strata bench` client (default: the server's binary)
cfg_dir=$here/configs/bench
[ -d "$cfg_dir" ] || cfg_dir=$here/../../configs/bench  # run from the repository
configs=${STRATA_BENCH_CONFIG_FILES:-"$cfg_dir/llama3-8b-full.yaml $cfg_dir/llama3-8b-sparse.yaml"}
input=${STRATA_BENCH_INPUT:-4000}
output=${STRATA_BENCH_OUTPUT:-500}
levels=${STRATA_BENCH_LEVELS:-"1:4 16:32 64:128 256:384"}
budget=${STRATA_BENCH_BUDGET_S:-540}
ready_s=${STRATA_BENCH_READY_S:-180}
tokenizer=${STRATA_BENCH_TOKENIZER:-$here/parity/tokenizer.json}
read -r -a serve_args <<<"${STRATA_BENCH_SERVE_ARGS:-}"
[ -f "$tokenizer" ] && serve_args+=(--set "model.tokenizer=$tokenizer")
[ -x "$strata" ] || { echo "bench_serve: no strata binary at $strata (STRATA_BIN)" >&2; exit 2; }

start=$(date +%s)
status=$out/status.txt
: >"$status"
rc_all=0
# stop_server, healthy, wait_ready (and server_pid)
. "$(dirname "${BASH_SOURCE[0]}")/server_lib.sh"
trap stop_server EXIT

# "idle busy table_bytes table_steps" from GET /metrics (strata_gpu_{idle,busy}_seconds_total,
# strata_table_upload_{bytes,steps}_total; 0 when the backend does not measure them): two
# scrapes give a level's GPU idle ratio (issue 24 item 4) and page-table bytes per step (item 2).
gpu_sums() {
  local line idle=0 busy=0 tb=0 ts=0
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || { echo "0 0 0 0"; return; }
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  while IFS= read -r -t 5 line <&3; do
    case $line in
      strata_gpu_idle_seconds_total*) idle=${line##* } ;;
      strata_gpu_busy_seconds_total*) busy=${line##* } ;;
      strata_table_upload_bytes_total*) tb=${line##* } ;;
      strata_table_upload_steps_total*) ts=${line##* } ;;
    esac
  done
  exec 3<&- 3>&-
  echo "$idle $busy $tb $ts"
}

read -r -a cfg_list <<<"$configs"
n_cfg=${#cfg_list[@]}
merge=()
i=0
for cfg in "${cfg_list[@]}"; do
  name=$(basename "$cfg" .yaml)
  deadline=$((start + budget * (i + 1) / n_cfg))
  i=$((i + 1))
  log=$out/server-$name.log
  "$strata" serve --config "$cfg" --port 0 "${serve_args[@]}" >"$log" 2>&1 &
  server_pid=$!
  if ! wait_ready "$log" "$ready_s" 1; then
    echo "$name: server not ready after $ready_s_took s (log: $log)" | tee -a "$status"
    tail -20 "$log"
    stop_server
    rc_all=1
    continue
  fi
  echo "$name: server ready on port $port in $ready_s_took s" | tee -a "$status"
  warm=1
  # Each level of a server gets its own prompt seed (level k: STRATA_BENCH_SEED + k, from 0): with
  # one seed for all, a later level re-sent the earlier levels' prompts and the prefix cache
  # served them (H200, 2026-12-03: 37 % of a c = 256 level's prompt tokens were cache hits after a
  # c = 128 level, +30 % output tok/s that no new client would see).
  seed=${STRATA_BENCH_SEED:-0}
  for lv in $levels; do
    c=${lv%%:*}
    n=${lv#*:}
    now=$(date +%s)
    if [ "$now" -ge $((deadline - 10)) ]; then
      echo "$name c=$c: skipped (time budget: $((now - start)) s of $budget used)" | tee -a "$status"
      rc_all=1
      continue
    fi
    dir=$out/$name-c$c
    mkdir -p "$dir"
    t1=$(date +%s)
    sums0=$(gpu_sums "$port")
    timeout $((deadline - now)) "$client" bench serve --host 127.0.0.1 --port "$port" \
      --label "$name" --input "$input" --output "$output" --concurrency "$c" --num-prompts "$n" \
      --steady-state --warmup "$warm" --seed "$seed" --out-dir "$dir" >"$dir/bench.log" 2>&1
    rc=$?
    warm=0
    seed=$((seed + 1))
    sums1=$(gpu_sums "$port")
    idle=$(echo "$sums0 $sums1" |
      awk '{di = $5 - $1; db = $6 - $2; if (di + db > 0) printf "%.4f", di / (di + db); else print "n/a"}')
    tables=$(echo "$sums0 $sums1" |
      awk '{ds = $8 - $4; if (ds > 0) printf "%.0f", ($7 - $3) / ds; else print "n/a"}')
    echo "$idle" >"$dir/gpu_idle.txt"
    echo "$tables" >"$dir/table_bytes_per_step.txt"
    echo "$name c=$c: $n measured, rc=$rc ($(($(date +%s) - t1)) s), GPU idle $idle, table bytes/step $tables" |
      tee -a "$status"
    grep -A3 "requests failed" "$dir/bench.log" | head -8 | tee -a "$status"
    [ "$rc" = 0 ] || rc_all=1
    [ -f "$dir/report.json" ] && merge+=(--merge "$dir/report.json")
  done
  stop_server
done

if [ ${#merge[@]} -gt 0 ]; then
  "$client" bench report "${merge[@]}" --out-dir "$out" >"$out/table.txt" 2>&1 || rc_all=1
  cat "$out/table.txt"
fi
echo "total $(($(date +%s) - start)) s, exit $rc_all" | tee -a "$status"
exit "$rc_all"
