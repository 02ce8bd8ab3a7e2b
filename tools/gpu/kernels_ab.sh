#!/usr/bin/env bash
# Kernel work on the GPU machine in one call (issue 18): GPU tests named in STRATA_KAB_TESTS,
# kernel microbenchmarks (gpu_bench subcommands in STRATA_KAB_BENCH), then the whole-model
# benchmarks (gpu_bench model / sparse) once per decode attention kernel named in
# STRATA_KAB_DECODE (STRATA_DECODE_ATTN values, cuda/attention.h), alternated twice.
#   bash tools/gpu/kernels_ab.sh RESULTS_DIR     (from the repo root, .gpu-bundle carried)
# Writes RESULTS_DIR/kab.tar.gz (every log) and prints a FIGURE summary last.
set -uo pipefail
set -f  # gtest filters hold * and must not glob
out=${1:?usage: kernels_ab.sh RESULTS_DIR}
logs=$(mktemp -d)
bin=${STRATA_KAB_BIN:-.gpu-bundle/bin}
{ date -u; cat "$bin/../COMMIT"; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; } >"$logs/env.log" 2>&1
for sub in ${STRATA_KAB_BENCH:-decode-attn gemm-small}; do
  echo "=== gpu_bench $sub" >>"$logs/bench.log"
  timeout "${STRATA_KAB_BENCH_S:-90}" "$bin/gpu_bench" "$sub" >>"$logs/bench.log" 2>&1
  echo "=== gpu_bench $sub rc=$?" >>"$logs/bench.log"
done
for spec in ${STRATA_KAB_TESTS:-}; do
  b=${spec%%:*} f=${spec#*:}
  echo "=== $b --gtest_filter=$f" >>"$logs/tests.log"
  start=$(date +%s)
  STRATA_DECODE_ATTN=${STRATA_KAB_TEST_DECODE:-} timeout "${STRATA_KAB_TEST_S:-180}" "$bin/$b" \
    --gtest_filter="$f" --gtest_color=no >>"$logs/tests.log" 2>&1
  echo "=== $b rc=$? ($(($(date +%s) - start)) s)" >>"$logs/tests.log"
done
for round in 1 2; do
  for k in ${STRATA_KAB_DECODE:-}; do
    for sub in ${STRATA_KAB_MODEL:-model sparse}; do
      echo "=== round $round STRATA_DECODE_ATTN=$k gpu_bench $sub" >>"$logs/model.log"
      STRATA_DECODE_ATTN=$k timeout 120 "$bin/gpu_bench" "$sub" >>"$logs/model.log" 2>&1
      echo "=== rc=$?" >>"$logs/model.log"
    done
  done
  [ "${STRATA_KAB_ROUNDS:-2}" = 1 ] && break
done
tar -czf "$out/kab.tar.gz" -C "$logs" .
grep -h "rc=\|FAILED\|PASSED" "$logs"/tests.log 2>/dev/null | tail -40
grep -h "TB/s\|floor\|TFLOP/s\|=== round" "$logs"/bench.log "$logs"/model.log 2>/dev/null | cut -c1-160
