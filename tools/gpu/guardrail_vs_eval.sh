#!/usr/bin/env bash
# The live quality guardrail against `strata eval` on the same documents (issue 22's H200 row,
# docs/quality.md "Guardrail vs eval"). From the repository root:
#   STRATA_BIN=build/release/bin/strata tools/gpu/guardrail_vs_eval.sh OUT
# 1. writes the evaluation documents' prompts (a fixed seed) to OUT/prompts.json;
# 2. per profile (A: the config as it is, B: a harsher capacity), first offline:
#    `strata eval --guardrail-agreement` serves each prompt greedily for N tokens with the
#    profile through the backend, teacher-forces prompt + output through the full cache and
#    scores every output position as the guardrail scores a replay (OUT/offline-P.json); then
#    live: `strata serve` with quality_monitor.sample_rate=1, the prompts sent one at a time as
#    greedy completions (token ids, temperature 0, max_tokens = min_tokens = N, ignore_eos),
#    /admin/api/quality polled until every request is scored (`strata eval --guardrail-live`,
#    OUT/P.json);
# 3. prints one table (profile, live agreement [95 % interval] (requests, positions), offline
#    the same, whether the intervals overlap, whether the counts are equal) to OUT/table.txt and
#    writes OUT/guardrail_vs_eval.json. Exit status 0 when every profile's intervals overlap
#    (with STRATA_GUARDRAIL_EXACT=1: when every profile's counts are equal, as on the CPU).
# Knobs: STRATA_BACKEND (cuda), STRATA_GUARDRAIL_CONFIG (configs/demo-$STRATA_BACKEND.yaml),
# STRATA_GUARDRAIL_MODEL (tools/evalmodel/model), STRATA_GUARDRAIL_CONTEXT (2048 prompt
# tokens), STRATA_GUARDRAIL_DOCS (16), STRATA_GUARDRAIL_TOKENS (N, 64), STRATA_GUARDRAIL_SEED (1),
# STRATA_GUARDRAIL_SETS_A / _B (space-separated key=value for --set; A: none, B:
# sparsity.capacity=256), STRATA_GUARDRAIL_READY_S (server start, 180).
# Time estimate on the H200 (not yet measured): 2 x (16 x 64 decode steps + 16 replays) at
# the evaluation model's size, well under a minute per profile and side.
set -uo pipefail
out=${1:?usage: guardrail_vs_eval.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
strata=${STRATA_BIN:-build/release/bin/strata}
backend=${STRATA_BACKEND:-cuda}
config=${STRATA_GUARDRAIL_CONFIG:-configs/demo-$backend.yaml}
model=${STRATA_GUARDRAIL_MODEL:-tools/evalmodel/model}
context=${STRATA_GUARDRAIL_CONTEXT:-2048}
docs=${STRATA_GUARDRAIL_DOCS:-16}
tokens=${STRATA_GUARDRAIL_TOKENS:-64}
seed=${STRATA_GUARDRAIL_SEED:-1}
sets_a=${STRATA_GUARDRAIL_SETS_A:-}
sets_b=${STRATA_GUARDRAIL_SETS_B:-sparsity.capacity=256}
ready_s=${STRATA_GUARDRAIL_READY_S:-180}
[ -x "$strata" ] || { echo "guardrail_vs_eval: no strata binary at $strata (STRATA_BIN)" >&2; exit 2; }

# stop_server, healthy, wait_ready (and server_pid)
. "$(dirname "${BASH_SOURCE[0]}")/server_lib.sh"
trap stop_server EXIT

"$strata" eval --write-prompts "$out/prompts.json" --model "$model" --context "$context" \
  --docs "$docs" --seed "$seed" || exit 1

rc=0
rows=()
for p in A B; do
  [ $p = A ] && sets=$sets_a || sets=$sets_b
  set_args=()
  for kv in $sets; do set_args+=(--set "$kv"); done
  echo "guardrail_vs_eval: profile $p (${sets:-as configured}): offline" >&2
  if ! "$strata" eval --guardrail-agreement --config "$config" --model "$model" \
    --backend "$backend" "${set_args[@]}" --prompts "$out/prompts.json" --max-tokens "$tokens" \
    --out "$out/offline-$p.json" >"$out/offline-$p.log" 2>&1; then
    echo "guardrail_vs_eval: profile $p: offline failed (tail of $out/offline-$p.log):" >&2
    tail -5 "$out/offline-$p.log" >&2
    rc=1
    continue
  fi
  log=$out/server-$p.log
  token=guardrail-$$-$RANDOM
  "$strata" serve --config "$config" --model "$model" --port 0 --set "backend.kind=$backend" \
    --admin-token "$token" \
    --set quality_monitor.sample_rate=1 --set quality_monitor.max_pending=4096 \
    "${set_args[@]}" >"$log" 2>&1 &
  server_pid=$!
  if ! wait_ready "$log" "$ready_s" 0.5; then
    echo "guardrail_vs_eval: profile $p: the server did not start (tail of $log):" >&2
    tail -5 "$log" >&2
    stop_server
    rc=1
    continue
  fi
  echo "guardrail_vs_eval: profile $p: live (port $port)" >&2
  if ! "$strata" eval --guardrail-live --port "$port" --prompts "$out/prompts.json" \
    --max-tokens "$tokens" --offline "$out/offline-$p.json" --label "$p" --out "$out/$p.json" \
    --admin-token "$token" \
    >"$out/live-$p.txt" 2>&1; then
    rc=1
  fi
  stop_server
  [ -s "$out/$p.json" ] || { echo "guardrail_vs_eval: profile $p: no live result:" >&2; cat "$out/live-$p.txt" >&2; rc=1; continue; }
  rows+=("$(tail -1 "$out/live-$p.txt")")
  if [ "${STRATA_GUARDRAIL_EXACT:-0}" = 1 ] && ! grep -q '"equal":true' "$out/$p.json"; then
    echo "guardrail_vs_eval: profile $p: live and offline counts differ" >&2
    rc=1
  fi
done

{
  echo "guardrail vs eval: $model, backend $backend, $docs documents of $context tokens, $tokens greedy tokens each; A: ${sets_a:-$config}, B: $sets_b"
  printf '%-8s %-44s   %-44s   %s   %s\n' profile "live agreement [95 %] (n)" "offline agreement [95 %] (n)" overlap counts
  for r in "${rows[@]}"; do echo "$r"; done
} | tee "$out/table.txt"
{
  printf '{"model":"%s","backend":"%s","context":%s,"documents":%s,"max_tokens":%s,"profiles":[' \
    "$model" "$backend" "$context" "$docs" "$tokens"
  first=1
  for p in A B; do
    [ -s "$out/$p.json" ] || continue
    [ $first = 1 ] || printf ','
    first=0
    tr -d '\n' <"$out/$p.json"
  done
  printf '],"ok":%s}\n' "$([ $rc = 0 ] && echo true || echo false)"
} >"$out/guardrail_vs_eval.json"
exit $rc
