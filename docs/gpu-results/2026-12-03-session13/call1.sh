#!/usr/bin/env bash
# Thirteenth session, call 1 (bundle build/s13, a build of the commit in COMMIT): the decode
# GEMM's stage release with one arrival per consumer warp instead of one per thread (issue 20
# item 2, issue 18 item 3): its tests, one layer's four GEMMs from a graph with each release
# (STRATA_DECODE_GEMM_RELEASE=thread is the old one), then Nsight Compute's full section set on
# the small-row FP8 kernels (wgmma at 1 / 16 / 64 rows, warpk at 8, cuBLASLt at 64), one layer's
# four GEMMs each (gpu_bench's STRATA_BENCH_NCU window): where the rest of the time goes.
set -u
O=$OUT; K=$PWD/build/${BUNDLE:-s13}; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
cat $K/COMMIT
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -v "^FIGURE" $L/$name.log | grep -v "^\[ *\(RUN\|OK\) " | head -${HEADN:-60}; }
b fp8_decode_test 120 $bin/gpu_gemm_decode_fp8_test --gtest_color=no
b decode_test 150 $bin/gpu_gemm_decode_test --gtest_color=no
b graph_warp 150 $bin/gpu_bench gemm-fp8-graph
b graph_thread 150 env STRATA_DECODE_GEMM_RELEASE=thread $bin/gpu_bench gemm-fp8-graph
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
HEADN=20 b ncu_gemm 200 env STRATA_BENCH_NCU=fp8g_t1_wgmma,fp8g_t16_wgmma,fp8g_t64_wgmma,fp8g_t8_warpk,fp8g_t64_cublasLt $NCU --profile-from-start off --clock-control none --set full -f -o $L/gemm $bin/gpu_bench gemm-fp8-graph
$NCU -i $L/gemm.ncu-rep --page details --print-units base > $L/gemm_details.txt 2>&1; echo "details rc=$? $(wc -l < $L/gemm_details.txt) lines"
$NCU -i $L/gemm.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,launch__grid_size,launch__registers_per_thread > $L/gemm_raw.csv 2>&1
cut -c1-400 $L/gemm_raw.csv | head -30
ls -la $L/gemm.ncu-rep; [ $(stat -c %s $L/gemm.ncu-rep) -gt 40000000 ] && rm $L/gemm.ncu-rep
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
