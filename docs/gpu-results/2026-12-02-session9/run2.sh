#!/usr/bin/env bash
# Call 2 of the ninth session: FP8 GEMM figures, then issue 21's quality on the evaluation model
# and the 4000/500 + 16000/500 sweeps, fp8 KV beside bf16 KV, full cache and the default sparse
# profile (kv_fp8_validate.sh; its gpu_kv_fp8_test stage skipped: call 1 ran it).
set -u
O=$OUT; K=$PWD/build/s9c1; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; }
b gemm_fp8 80 $bin/gpu_bench gemm-fp8; grep -E "wgmma|layer" $L/gemm_fp8.log | grep -v "^FIGURE" | head -20
b gemm_decode 80 $bin/gpu_bench gemm-decode; grep -iE "fp8|layer" $L/gemm_decode.log | grep -v "^FIGURE" | head -20
C=$bin/configs/bench
STRATA_KVFP8_TESTS=0 STRATA_KV_FP8_SPARSE=1 STRATA_KVFP8_LEVELS_4K="256:384" STRATA_KVFP8_LEVELS_16K="64:64" \
  STRATA_KVFP8_CONFIGS="$C/llama3-8b-full.yaml $C/llama3-8b-full-kvfp8.yaml $C/llama3-8b-sparse.yaml $C/llama3-8b-sparse-kvfp8.yaml" \
  $bin/kv_fp8_validate.sh $bin $L/kvfp8 $(( 540 - $(el) )) > $L/kvfp8.log 2>&1
cat $L/kvfp8/summary.txt
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
