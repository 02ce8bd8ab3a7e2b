#!/usr/bin/env bash
# Call 1 of the eleventh session: the Hopper prefill kernels over the bf16 stage of an FP8 KV
# context (first GPU run) and every fp8 KV test; the FP8 tests with kWarpK as the untuned rule at
# 1-8 rows; the sparse model suite; then fp8 KV quality on the evaluation model at 32 docs x 128
# positions and 200 retrieval cases (kv_fp8_validate.sh's new defaults).
set -u
O=$OUT; K=$PWD/build/s11; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|FIGURE kv_fp8_prefill" $L/$name.log | head -40; }
cat $K/COMMIT
t kv_fp8 200 $bin/gpu_kv_fp8_test
t fp8 150 $bin/gpu_fp8_test
t gemm_decode_fp8 60 $bin/gpu_gemm_decode_fp8_test
t sparse_model 90 $bin/gpu_sparse_model_test
STRATA_KVFP8_TESTS=0 STRATA_KVFP8_SWEEPS=0 \
  $bin/kv_fp8_validate.sh $bin $L/kvfp8 $(( 540 - $(el) )) > $L/kvfp8.log 2>&1
grep -v "^sweep" $L/kvfp8/summary.txt | head -40
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
