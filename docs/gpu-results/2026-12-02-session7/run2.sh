#!/usr/bin/env bash
# Session 7 call 2: the helpers' kernels (wgmma decode GEMM, hopper_v6, e4m3 tensor-core decode, mixed overlap,
# pipelined census) - tests first, then their benchmarks.
set -u
O=$OUT; K=$PWD/build/s7c2; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $L/env.log
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; local rc=$?; echo "$name rc=$rc ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -6; }
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; }
t gemm_decode 90 $bin/gpu_gemm_decode_test
STRATA_ATTN_KERNELS=hopper,hopper_v5,hopper_v6 t attn_prefill 150 $bin/gpu_attention_test --gtest_filter='GpuAttention.Prefill*'
t kv_fp8 120 $bin/gpu_kv_fp8_test
t async_steps 150 $bin/gpu_async_steps_test
t sparse_mixed 90 $bin/gpu_sparse_model_test --gtest_filter='GpuSparseModel.Mixed*:GpuSparseModel.KeptPositionsMatchCpu*'
b bench_gemm_decode 90 $bin/gpu_bench gemm-decode; grep -iE "layer|total" $L/bench_gemm_decode.log | head -12
STRATA_ATTN_KERNELS=hopper_v5,hopper_v6 b bench_prefill 90 $bin/gpu_bench prefill-attn; grep -E "FIGURE bench_prefill_attn.*tflops" $L/bench_prefill.log | head -12
b bench_decode_attn 60 $bin/gpu_bench decode-attn; grep -iE "fp8|e4m3" $L/bench_decode_attn.log | grep -v "^FIGURE" | head -8
b bench_model 100 $bin/gpu_bench model; grep -iE "decode step|prefill" $L/bench_model.log | grep -v "^FIGURE" | head -6
b bench_sparse 70 $bin/gpu_bench sparse; grep -iE "decode step" $L/bench_sparse.log | grep -v "^FIGURE" | head -4
[ $(el) -lt 470 ] && { b bench_mixed 110 $bin/gpu_bench mixed; grep -v "^FIGURE" $L/bench_mixed.log | tail -30; }
[ $(el) -lt 520 ] && t attn_decode_rest 60 $bin/gpu_attention_test --gtest_filter='GpuAttention.DecodeBitwiseRepeatable*:GpuAttention.Decode*Sparse*'
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
