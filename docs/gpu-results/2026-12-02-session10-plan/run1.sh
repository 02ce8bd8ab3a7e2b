#!/usr/bin/env bash
# Planned call 1 (see README.md): the ninth session's CPU-side changes, then fp8 KV quality.
set -u
O=$OUT; K=$PWD/build/s10; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -8; }
t kv_fp8_optin 60 $bin/gpu_kv_fp8_test --gtest_filter='GpuKvFp8.SparsePlanRunsWithoutAnOptIn'
t gemm_decode_fp8 90 $bin/gpu_gemm_decode_fp8_test
t fp8 180 $bin/gpu_fp8_test
STRATA_KVFP8_TESTS=0 STRATA_KVFP8_SWEEPS=0 \
  $bin/kv_fp8_validate.sh $bin $L/kvfp8 $(( 470 - $(el) )) > $L/kvfp8.log 2>&1
cat $L/kvfp8/summary.txt | grep -v "^sweep" | head -60
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
