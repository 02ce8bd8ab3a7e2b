#!/usr/bin/env bash
# Seventeenth session, call 1: the sixteenth session's call1.sh (which never ran), with the
# pre-reorder gpu_bench (build/s16a0) optional: when it is not carried, only the new decode-attn runs;
# the bundle is build/s17b (the landed CUDA code of 760cbed, built at the prompt-logprobs commit) and
# adds gpu_async_steps_test's prompt-logprobs test after the sparse-loo bench.
# Bundles (build/release of the landed commit, then of 848317e = c96bef3^ for the old gpu_bench):
#   STRATA_PACK_EVALMODEL=0 tools/gpu/pack.sh build/release build/s17b gpu_sparse_kernels_test gpu_sparse_model_test gpu_attention_test gpu_async_steps_test
#   (worktree of 848317e, build gpu_bench) d=$(mktemp -d); tar -xJf <its pack>/b.tar.xz -C $d ./bin/gpu_bench ./COMMIT; mkdir -p build/s16a0; tar -cJf build/s16a0/b.tar.xz -C $d .
# carry ["build/s16a0", "build/s17b"] (two full bundles exceed the 64 MiB carry: s16a0 holds gpu_bench alone).
# The flip, once the tests pass: STRATA_SCORE_IN_ATTN on by default (forward.cpp env_switch default
# true; the comments in backend_impl.h, backend_probe.h, sparse_model_test.cpp; cuda-backend.md).
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
K=$PWD/build/s17b; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -1 $K/COMMIT
# s16a0: gpu_bench alone of the same tree before the decode attention's reorder (c96bef3), for the decode-attn A/B.
K0=$PWD/build/s16a0; B0=""; if [ -f $K0/b.tar.xz ]; then [ -d $K0/bin ] || tar -xJf $K0/b.tar.xz -C $K0; B0=$K0/bin; head -1 $K0/COMMIT; fi
nvidia-smi --query-gpu=name --format=csv,noheader
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|^(eager|graphs|in attention)" $L/$name.log | head -14; }
t sparse_kernels 60 $B/gpu_sparse_kernels_test --gtest_filter='SparseDecode.*'
t sparse_model 150 $B/gpu_sparse_model_test
timeout 120 $B/gpu_bench sparse-loo > $L/bench_loo.log 2>&1; echo "bench sparse-loo rc=$? ($(el) s)"; grep -E "^sparse step|^leave out|sum to" $L/bench_loo.log | cut -c1-230
t async_prompt_lp 90 $B/gpu_async_steps_test --gtest_filter='*PromptLogprobs*'; grep -E "^prompt logprobs vs" $L/async_prompt_lp.log
for v in 0 1; do BB=$B; if [ $v = 0 ]; then [ -n "$B0" ] || continue; BB=$B0; fi; timeout 90 $BB/gpu_bench decode-attn > $L/bench_dattn$v.log 2>&1; echo "bench decode-attn (v$v: 0 = before the reorder) rc=$? ($(el) s)"; grep -E "shape 0 \+ score update|B=64 len=4096.*splits=1 mma shape 0:|B=256 len=512.*splits=1 mma shape 0:" $L/bench_dattn$v.log | grep -v FIGURE | head -8; done
for i in 1 2; do ev=1; [ $i = 2 ] && ev=0; STRATA_GEMM_TUNE_EVICT=$ev timeout 100 $B/gpu_bench sparse > $L/bench_sparse$i.log 2>&1; echo "bench sparse $i (autotune evict=$ev) rc=$? ($(el) s)"; grep -E "^FIGURE bench_sparse_decode_8b_b64_fused(_[a-z_]+)?_ms" $L/bench_sparse$i.log | tr '\n' ' '; echo; done
for ev in 0 1; do STRATA_GEMM_TUNE_EVICT=$ev timeout 60 $B/gpu_bench gemm-tune > $L/bench_tune$ev.log 2>&1; echo "gemm-tune evict=$ev rc=$? ($(el) s)"; grep -E "T=64 |T=1 |autotune:|layer GEMMs" $L/bench_tune$ev.log | grep -v FIGURE | head -16; done
t attention 100 $B/gpu_attention_test --gtest_filter='*Decode*'
cd $O && tar -czf all.tgz logs && rm -f logs/sparse_kernels.log logs/sparse_model.log logs/attention.log logs/async_prompt_lp.log; echo "total $(el) s"
