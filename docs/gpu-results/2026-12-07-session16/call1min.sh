#!/usr/bin/env bash
# call1min.sh: call1.sh cut to what the last of the device time could hold (the tests, sparse-loo, the new decode-attn).
# Sixteenth session, call 1: the fifteenth session's call 2 (it did not run there), with the decode-attn
# bench timed in graphs too and the new leave-one-out census of the sparse step (gpu_bench sparse-loo).
# first call. Build the landed commit, then
#   STRATA_PACK_EVALMODEL=0 tools/gpu/pack.sh build/release build/s16a gpu_sparse_kernels_test gpu_sparse_model_test gpu_attention_test
# and run this with carry ["build/s16a"] (about 90 s). It checks the score rule with rounding
# intrinsics (call 1: the in-kernel update differed from the update kernel in the last bit of
# some scores); if both tests pass, turn STRATA_SCORE_IN_ATTN on by default (forward.cpp). SparseDecode.* (case 4 bitwise, the RoPE resolve), the whole
# sparse model test, gpu_bench sparse three times (the variants' noise), decode-attn (the attention tests passed in call 1; their code is unchanged).
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
K=$PWD/build/s16b; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -1 $K/COMMIT
# s16a0: gpu_bench alone of the same tree before the decode attention's reorder (c96bef3), for the decode-attn A/B.
K0=$PWD/build/s16a0; [ -d $K0/bin ] || tar -xJf $K0/b.tar.xz -C $K0; B0=$K0/bin; head -1 $K0/COMMIT
nvidia-smi --query-gpu=name --format=csv,noheader
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|^(eager|graphs|in attention)" $L/$name.log | head -14; }
t sparse_kernels 60 $B/gpu_sparse_kernels_test --gtest_filter='SparseDecode.*'
t sparse_model 150 $B/gpu_sparse_model_test
timeout 120 $B/gpu_bench sparse-loo > $L/bench_loo.log 2>&1; echo "bench sparse-loo rc=$? ($(el) s)"; grep -E "^sparse step|^leave out|sum to" $L/bench_loo.log | cut -c1-230
for v in 1; do BB=$B; [ $v = 0 ] && BB=$B0; timeout 90 $BB/gpu_bench decode-attn > $L/bench_dattn$v.log 2>&1; echo "bench decode-attn (v$v: 0 = before the reorder) rc=$? ($(el) s)"; grep -E "shape 0 \+ score update|B=64 len=4096.*splits=1 mma shape 0:|B=256 len=512.*splits=1 mma shape 0:" $L/bench_dattn$v.log | grep -v FIGURE | head -8; done
cd $O && tar -czf all.tgz logs && rm -f logs/sparse_kernels.log logs/sparse_model.log logs/attention.log; echo "total $(el) s"
