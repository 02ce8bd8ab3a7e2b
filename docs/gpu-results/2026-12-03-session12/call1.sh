#!/usr/bin/env bash
# Twelfth session, call 1 (bundle build/s12, a build of the commit in COMMIT): the eleventh
# session's planned call 6 (FP8 weights vs bf16 quality on the evaluation model through CUDA,
# issue 20's bar, never run on a GPU), then what the small-row GEMMs' W stream can reach
# (gpu_bench stream-probe) and one layer's four GEMMs per FP8 path from a CUDA graph
# (gpu_bench gemm-fp8-graph): the split of the FP8 16-64-row shortfall into pattern, launch and
# arithmetic.
set -u
O=$OUT; K=$PWD/build/${BUNDLE:-s12}; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
cat $K/COMMIT
BUNDLE=${BUNDLE:-s12} bash docs/gpu-results/2026-12-03-session11/run6.sh
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -v "^FIGURE" $L/$name.log | head -80; }
b pdl_test 60 $bin/gpu_gemm_decode_fp8_test --gtest_filter='*Pdl*' --gtest_color=no
b stream_probe 90 $bin/gpu_bench stream-probe
b gemm_fp8_graph 150 $bin/gpu_bench gemm-fp8-graph
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
