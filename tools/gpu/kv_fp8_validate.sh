#!/usr/bin/env bash
# Issue 21's GPU checks in one call (docs/kv-fp8.md), time-boxed:
#   tools/gpu/kv_fp8_validate.sh BIN_DIR OUT_DIR [BUDGET_S]
# BIN_DIR holds strata, gpu_kv_fp8_test (and configs/bench/, bench_serve.sh beside it or in
# the repository). In order, each stage skipped when the budget left is below its estimate:
#   1. gpu_kv_fp8_test: kernels against the CPU fp8 oracle, the model cases (the CUDA backend vs
#      the CPU backend with the same scales; the device calibration of random:tiny against the
#      CPU's), and the sparse-layer cases;
#   2. quality on the evaluation model (STRATA_EVAL_MODEL, default tools/evalmodel/model):
#      `strata eval --backend cuda` with bf16 and fp8 KV on the same inputs, then
#      `strata eval --compare` (perplexity change, greedy agreement, retrieval paired
#      differences): the full cache (--policies none), then the sparse policies;
#   3. the serving sweeps, fp8 KV beside bf16 KV in the same call (bench_serve.sh, one server
#      per configuration): 4000/500 (STRATA_KVFP8_LEVELS_4K, default "64:128 256:384"), then
#      16000/500 (STRATA_KVFP8_LEVELS_16K, default "16:32 64:64"); configurations
#      STRATA_KVFP8_CONFIGS (default: llama3-8b-full.yaml, llama3-8b-full-kvfp8.yaml).
# Writes OUT_DIR/summary.txt (one line per stage with its exit status and seconds) and every
# log under OUT_DIR.
set -uo pipefail
bin=${1:?usage: kv_fp8_validate.sh BIN_DIR OUT_DIR [BUDGET_S]}
out=${2:?usage: kv_fp8_validate.sh BIN_DIR OUT_DIR [BUDGET_S]}
budget=${3:-540}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
stage() {  # name estimate_s timeout_s command...
  local name=$1 est=$2 limit=$3
  shift 3
  if [ "$(left)" -lt "$est" ]; then
    note "$name skipped: $(left) s left, needs about $est"
    return 1
  fi
  local t0 rc
  t0=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  note "$name rc=$rc $(($(date +%s) - t0)) s"
  return $rc
}

# 1. the tests (STRATA_KVFP8_TESTS=0 skips them: a call that ran gpu_kv_fp8_test already)
if [ "${STRATA_KVFP8_TESTS:-1}" = 0 ]; then
  note "kv_fp8_test skipped: STRATA_KVFP8_TESTS=0"
else
  stage kv_fp8_test 200 300 "$bin/gpu_kv_fp8_test" --gtest_color=no
  grep -E "^\[  FAILED|^\[  PASSED|device calibration|FIGURE kv_fp8_model" "$out/kv_fp8_test.log" \
    2>/dev/null | head -30 >>"$summary"
fi

# 2. quality on the evaluation model
model=${STRATA_EVAL_MODEL:-$here/../evalmodel/model}
# The sample: 2 documents x 64 scored tokens (the ninth session's call 2) left the GPU's own
# run-to-run spread (the full cache's row of two bf16 runs whose batches differ: 97.7 % agreement,
# +0.6 % perplexity; of two fp8 runs 96.1 %, -5.1 %) as large as the bars, so the default is 8x
# the positions; the comparison of the two bf16 runs' full-cache rows is reported as the floor.
# The tenth session's 8 x 128 positions put the floor at 99.0 % / +0.3 %, but its 50 retrieval
# cases left +-3.8 points on a paired difference whose bar is 1 point: the default is now 32
# documents and 200 retrieval cases (each eval ran 3-6 s at the old sample).
eval_args=(--model "$model" --backend cuda --contexts 4096 --docs "${STRATA_KVFP8_DOCS:-32}"
  --retrieval "${STRATA_KVFP8_RETRIEVAL:-200}" --seed 7 --scored-tokens "${STRATA_KVFP8_SCORED:-128}")
pair() {  # name estimate args...: the bf16 and fp8 runs, then the comparison
  local name=$1 est=$2
  shift 2
  stage "eval_${name}_bf16" "$est" 240 "$bin/strata" eval "${eval_args[@]}" "$@" --kv-dtype bf16 \
    --out-dir "$out/eval_${name}_bf16" || return 1
  stage "eval_${name}_fp8" "$est" 240 "$bin/strata" eval \
    "${eval_args[@]}" "$@" --kv-dtype fp8 --out-dir "$out/eval_${name}_fp8" || return 1
  "$bin/strata" eval --compare "$out/eval_${name}_bf16/eval.json,$out/eval_${name}_fp8/eval.json" \
    --out-dir "$out/compare_${name}" >"$out/compare_${name}.txt" 2>&1
  note "compare_${name}: $(tail -n 1 "$out/compare_${name}.txt")"
  cat "$out/compare_${name}.txt" >>"$summary"
}
pair full 30 --policies none
pair sparse 60 --policies window,snapkv,scored --full-layers 1 --ratios 4,10
# The floor: the same full-cache cases in two bf16 runs (different batch compositions).
if [ -f "$out/eval_full_bf16/eval.json" ] && [ -f "$out/eval_sparse_bf16/eval.json" ]; then
  "$bin/strata" eval --compare "$out/eval_full_bf16/eval.json,$out/eval_sparse_bf16/eval.json" \
    --out-dir "$out/compare_floor_bf16" >"$out/compare_floor_bf16.txt" 2>&1
  note "floor (bf16 vs bf16, full cache rows):"
  cat "$out/compare_floor_bf16.txt" >>"$summary"
fi

# 3. the serving sweeps
serve=$bin/bench_serve.sh
[ -x "$serve" ] || serve=$here/bench_serve.sh
cfg=$bin/configs/bench
[ -d "$cfg" ] || cfg=$here/../../configs/bench
configs=${STRATA_KVFP8_CONFIGS:-"$cfg/llama3-8b-full.yaml $cfg/llama3-8b-full-kvfp8.yaml"}
sweep() {  # name input levels (STRATA_KVFP8_SWEEPS=0 skips them)
  local name=$1 input=$2 levels=$3 share
  [ "${STRATA_KVFP8_SWEEPS:-1}" = 0 ] && { note "$name skipped: STRATA_KVFP8_SWEEPS=0"; return 0; }
  share=$(($(left) - 20))
  [ "$share" -gt 60 ] || { note "$name skipped: $(left) s left"; return 1; }
  [ "$name" = sweep_4k ] && share=$((share * 55 / 100))  # leave the 16k sweep its part
  local tok=${STRATA_BENCH_TOKENIZER:-$bin/../tokenizer.json}  # (tools/gpu/pack.sh's layout)
  STRATA_BENCH_TOKENIZER=$tok STRATA_BIN="$bin/strata" STRATA_BENCH_CONFIG_FILES="$configs" STRATA_BENCH_INPUT=$input \
    STRATA_BENCH_OUTPUT=500 STRATA_BENCH_LEVELS="$levels" STRATA_BENCH_BUDGET_S=$share \
    stage "$name" 60 $((share + 30)) "$serve" "$out/$name"
  [ -f "$out/$name/table.txt" ] && cat "$out/$name/table.txt" >>"$summary"
  [ -f "$out/$name/status.txt" ] && cat "$out/$name/status.txt" >>"$summary"
}
sweep sweep_4k 4000 "${STRATA_KVFP8_LEVELS_4K:-64:128 256:384}"
sweep sweep_16k 16000 "${STRATA_KVFP8_LEVELS_16K:-16:32 64:64}"
note "total $(($(date +%s) - start)) s"
