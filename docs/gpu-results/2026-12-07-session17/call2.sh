#!/usr/bin/env bash
# Seventeenth session, call 2: the prompt-logprobs GPU test with its reference fixed (teacher
# forcing needs a step budget of the whole prompt), and the flip of STRATA_SCORE_IN_ATTN (on by
# default since call 1 passed its bitwise tests): the whole sparse model test and the sparse bench
# under the new default; the RoPE cos/sin table (bitwise against the per-use sincos, and the
# sparse step with STRATA_ROPE_TABLE=1 / 0). Bundle: STRATA_PACK_EVALMODEL=0 tools/gpu/pack.sh
# build/release build/s17c gpu_async_steps_test gpu_sparse_model_test gpu_kernels_test;
# carry ["build/s17c"].
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
K=$PWD/build/s17c; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -3 $K/COMMIT
nvidia-smi --query-gpu=name --format=csv,noheader
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|exception|^prompt logprobs vs" $L/$name.log | head -14; }
t async_prompt_lp 100 $B/gpu_async_steps_test --gtest_filter='*PromptLogprobs*'
t rope 60 $B/gpu_kernels_test --gtest_filter='*Rope*'
for rt in 1 0; do STRATA_ROPE_TABLE=$rt timeout 100 $B/gpu_bench sparse > $L/bench_sparse_rt$rt.log 2>&1; echo "bench sparse rope table=$rt rc=$? ($(el) s)"; grep -E "^FIGURE bench_sparse_decode_8b_b64_fused(_[a-z_]+)?_ms" $L/bench_sparse_rt$rt.log | tr '\n' ' '; echo; done
t sparse_model 150 $B/gpu_sparse_model_test
echo "total $(el) s"
