#!/usr/bin/env bash
# Thirteenth session, call 6 (bundle build/s13c, 5d66b49): mbar_wait now polls through
# mbar_try_wait and mbar_wait_cluster is one poll statement (a refactor of cuda/hopper_sm90.cuh,
# the same PTX): the decode GEMM tests and the attention tests (the Hopper prefill kernels wait on
# the same barriers), and one layer's FP8 GEMMs from a graph.
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
K=$PWD/build/s13c; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -1 $K/COMMIT
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -12; }
t fp8_decode 60 $B/gpu_gemm_decode_fp8_test
t decode 60 $B/gpu_gemm_decode_test
t attention 120 $B/gpu_attention_test
timeout 30 $B/gpu_bench gemm-fp8-graph > $L/graph.log 2>&1; echo "graph rc=$?"; grep "wgmma  \|warpk" $L/graph.log | grep -v FIGURE
cd $O && tar -czf all.tgz logs; echo "total $(( $(date +%s) - t0 )) s"
