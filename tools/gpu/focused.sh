#!/usr/bin/env bash
# A short GPU run for when device time is scarce (tools/gpu/run.sh is the full one):
# trains the evaluation model (tools/evalmodel/train.py) in the background while GPU
# correctness tests run beside it (they cap their KV memory), then runs gpu_bench
# subcommands once the GPU is free (they take 90 % of free memory and want it quiet).
#   bash tools/gpu/focused.sh RESULTS_DIR      (from the repo root, .gpu-bundle carried)
# Env:
#   STRATA_FOCUS_TRAIN_S   training budget in seconds, imports included (0: no training)
#   STRATA_FOCUS_TESTS     "binary:gtest_filter binary:gtest_filter ..." (from .gpu-bundle/bin)
#   STRATA_FOCUS_BENCH     "subcommand subcommand ..." of gpu_bench
#   STRATA_FOCUS_TEST_S    timeout of each test binary (default 60)
#   STRATA_FOCUS_ISSUE9=1  also run the issue-9 checks (docs/sparse-decode-audit.md): decode
#                          attention bitwise repeatability, and the sparse model's repeat /
#                          graph-vs-eager / poisoned-vs-zeroed lockstep runs (FIRSTDIFF lines)
# Writes into RESULTS_DIR: train.log + the trainer's files (model.safetensors, config.json,
# metrics.json, check.json), tests.log (nvidia-smi first), bench.log: 7 files, so a
# checkpoint's .tmp left by a kill still fits the 8 that come back.
set -uo pipefail
set -f  # gtest filters hold * and must not glob
out=${1:?usage: focused.sh RESULTS_DIR}
mkdir -p "$out"
bin=.gpu-bundle/bin
commit=$(cat .gpu-bundle/COMMIT 2>/dev/null || echo unknown)
{ date -u; echo "commit $commit"; nvidia-smi; } >"$out/tests.log" 2>&1
train_s=${STRATA_FOCUS_TRAIN_S:-0}
train_pid=
if [ "$train_s" != 0 ]; then
  (PYTHONUNBUFFERED=1 timeout $((train_s + 25)) python3 tools/evalmodel/train.py \
     --data .gpu-bundle/evalmodel --budget-s "$train_s" --out "$out" >"$out/train.log" 2>&1
   echo "train rc=$?" >>"$out/train.log") &
  train_pid=$!
  sleep 2
fi
tests=${STRATA_FOCUS_TESTS:-}
if [ "${STRATA_FOCUS_ISSUE9:-0}" = 1 ]; then
  tests="gpu_attention_test:GpuAttention.Decode* gpu_sparse_model_test:GpuSparseModel.RunsAreBitwiseRepeatable:GpuSparseModel.GraphReplayEqualsEager:GpuSparseModel.NoReadOfUnwrittenSlots:GpuSparseModel.DecodeStep*:GpuSparseModel.MixedBatch* $tests"
fi
for spec in $tests; do
  b=${spec%%:*} f=${spec#*:}
  echo "=== $b --gtest_filter=$f" >>"$out/tests.log"
  start=$(date +%s)
  timeout "${STRATA_FOCUS_TEST_S:-60}" "$bin/$b" --gtest_filter="$f" --gtest_color=no \
    >>"$out/tests.log" 2>&1
  echo "=== $b rc=$? ($(( $(date +%s) - start )) s)" >>"$out/tests.log"
done
[ -n "$train_pid" ] && wait "$train_pid"
for sub in ${STRATA_FOCUS_BENCH:-}; do
  echo "=== gpu_bench $sub" >>"$out/bench.log"
  timeout 60 "$bin/gpu_bench" "$sub" >>"$out/bench.log" 2>&1
  echo "=== gpu_bench $sub rc=$?" >>"$out/bench.log"
done
grep -h "rc=" "$out"/tests.log "$out"/bench.log "$out"/train.log 2>/dev/null
tail -5 "$out/train.log" 2>/dev/null
