#!/usr/bin/env bash
# Thirteenth session, call 3 (bundle build/s13): per-kernel time and DRAM bytes of one decode
# step (Nsight Compute, kernels serialized, no PDL overlap): the 8B model at batch 1 and 64,
# context 4096 (gpu_bench model, issue 18's single-stream TPOT and full-cache step), and the
# default sparse profile's step at batch 64 (gpu_bench sparse, issue 18's 1.39x of its floor).
set -u
O=$OUT; K=$PWD/build/${BUNDLE:-s13}; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
cat $K/COMMIT
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size
n() { local name=$1 to=$2 tags=$3; shift 3; timeout $to env STRATA_BENCH_NCU=$tags $NCU --profile-from-start off --clock-control none --metrics $M --csv --log-file $L/$name.csv "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -v "^FIGURE" $L/$name.log | head -30; wc -l $L/$name.csv; }
n model 300 step_b1,step_b64 $bin/gpu_bench model
n sparse 200 sparse_step_fused $bin/gpu_bench sparse
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
