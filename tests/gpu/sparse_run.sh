#!/usr/bin/env bash
# Runs the CUDA sparsity tests, a memcheck pass and the microbenchmarks on the GPU machine.
# Usage: tests/gpu/sparse_run.sh BIN_DIR RESULTS_DIR   (BIN_DIR holds gpu_sparse_kernels_test)
set -uo pipefail
bin=${1:?bin dir}
out=${2:?results dir}
mkdir -p "$out"
t="$bin/gpu_sparse_kernels_test"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
"$t" 2>&1 | tee "$out/sparse_tests.log"
rc_tests=${PIPESTATUS[0]}
"$t" --gtest_filter='SparseBench.*' --gtest_also_run_disabled_tests 2>&1 | tee "$out/sparse_bench.log"
rc_bench=${PIPESTATUS[0]}
rc_mem=skipped
if command -v compute-sanitizer > /dev/null; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$t" \
    --gtest_filter='SparseDirect.*:SparseDecode.*' > "$out/memcheck.log" 2>&1
  rc_mem=$?
fi
echo "==== summary ===="
grep -h "\[sparse\]\|PASSED\|FAILED" "$out/sparse_tests.log" "$out/sparse_bench.log"
tail -3 "$out/memcheck.log" 2>/dev/null
echo "tests rc=$rc_tests bench rc=$rc_bench memcheck rc=$rc_mem"
[ "$rc_tests" = 0 ] && [ "$rc_bench" = 0 ]
