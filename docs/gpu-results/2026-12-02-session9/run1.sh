#!/usr/bin/env bash
# Call 1 of the ninth session: correctness of the eighth session's GPU code (session8-plan README).
set -u
O=$OUT; K=$PWD/build/s9c1; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $L/env.log
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; local rc=$?; echo "$name rc=$rc ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -8; }
t gemm_decode 60 $bin/gpu_gemm_decode_test
t gemm_decode_fp8 90 $bin/gpu_gemm_decode_fp8_test
t kv_fp8_sparse_kernels 150 $bin/gpu_sparse_kernels_test --gtest_filter='*E4m3*'
t kv_fp8 360 $bin/gpu_kv_fp8_test
grep -hE "device calibration|FIGURE kv_fp8_model" $L/kv_fp8.log | head -30
[ $(el) -lt 440 ] && t sparse_kernels_bf16 110 $bin/gpu_sparse_kernels_test --gtest_filter='-*E4m3*'
[ $(el) -lt 480 ] && t sparse_model 100 $bin/gpu_sparse_model_test
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
