#!/usr/bin/env bash
# Planned call 2: FP8 GEMM figures, then issue 21's quality and sweeps (see README.md).
set -u
O=$OUT; K=$PWD/build/s9c1; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; }
b gemm_fp8 90 $bin/gpu_bench gemm-fp8; grep -E "wgmma|layer" $L/gemm_fp8.log | grep -v "^FIGURE" | head -20
b gemm_decode 90 $bin/gpu_bench gemm-decode; grep -iE "fp8|layer" $L/gemm_decode.log | grep -v "^FIGURE" | head -20
STRATA_KV_FP8_SPARSE=1 $bin/kv_fp8_validate.sh $bin $L/kvfp8 $(( 560 - $(el) )) > $L/kvfp8.log 2>&1
cat $L/kvfp8/summary.txt
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
