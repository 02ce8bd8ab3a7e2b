#!/usr/bin/env bash
# Fourteenth session, call 2 (bundle build/s14c): the scored layers' score update inside the decode
# attention kernel and the resolve on a side stream (issue 18). Correctness first (sparse kernels
# and model tests: the new bitwise comparisons against the one-stream update-kernel path), then
# gpu_bench sparse (the A/B of the two changes in one process) and decode-attn (the update at
# 256 x 512 and 64 x 512) and the fp8-KV sparse tests; this card's copy ceiling. After call 1
# (H100): kept-logit rows 16-byte aligned, scores loaded ahead, the resolve one warp per head.
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
K=$PWD/build/s14c; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -3 $K/COMMIT
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|does not fit" $L/$name.log | head -12; }
t sparse_kernels 60 $B/gpu_sparse_kernels_test
t sparse_model 150 $B/gpu_sparse_model_test
timeout 20 $B/gpu_bench copy > $L/bench_copy.log 2>&1; grep '^device copy' $L/bench_copy.log
timeout 150 $B/gpu_bench sparse > $L/bench_sparse.log 2>&1; echo "bench sparse rc=$? ($(el) s)"; grep -E "^sparse decode|^full-cache" $L/bench_sparse.log
timeout 120 $B/gpu_bench decode-attn > $L/bench_dattn.log 2>&1; echo "bench decode-attn rc=$? ($(el) s)"; grep -E "score update|splits=1 mma shape 0" $L/bench_dattn.log | grep -v FIGURE | head -24
t kv_fp8 60 $B/gpu_kv_fp8_test --gtest_filter='GpuKvFp8.Sparse*:GpuKvFp8.Tiny*'
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
