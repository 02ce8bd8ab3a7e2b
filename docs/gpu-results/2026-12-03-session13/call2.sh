#!/usr/bin/env bash
# Thirteenth session, call 2 (bundle build/s13, a build of the commit in COMMIT): the decode
# GEMM's cluster split-K (e4m3, TN <= 64, tiles <= blocks: a tile's k range over a cluster of up
# to 4 CTAs, reduced in distributed shared memory; one block per tile where the tiles nearly
# cover the grid) against stream-K (STRATA_DECODE_GEMM_SPLIT=streamk): the decode GEMM tests,
# the FP8 GEMM tests, one layer's four GEMMs from a graph and per GEMM (gpu_bench gemm-decode),
# each split.
set -u
O=$OUT; K=$PWD/build/${BUNDLE:-s13}; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
cat $K/COMMIT
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -v "^FIGURE" $L/$name.log | grep -v "^\[ *\(RUN\|OK\) " | grep -v "^\[-" | head -${HEADN:-60}; }
HEADN=30 b fp8_decode_test 150 $bin/gpu_gemm_decode_fp8_test --gtest_color=no
HEADN=20 b decode_test 150 $bin/gpu_gemm_decode_test --gtest_color=no
HEADN=20 b fp8_test 200 $bin/gpu_fp8_test --gtest_color=no
HEADN=40 b graph_cluster 150 $bin/gpu_bench gemm-fp8-graph
HEADN=40 b graph_streamk 150 env STRATA_DECODE_GEMM_SPLIT=streamk $bin/gpu_bench gemm-fp8-graph
HEADN=80 b gemm_decode_cluster 150 $bin/gpu_bench gemm-decode
HEADN=80 b gemm_decode_streamk 150 env STRATA_DECODE_GEMM_SPLIT=streamk $bin/gpu_bench gemm-decode
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
