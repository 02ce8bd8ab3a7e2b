#!/usr/bin/env bash
# Thirteenth session, call 4: the split-KV merge with its loads issued ahead (one launch no
# longer waits one L2 round trip per split) and the argmax with 8 loads ahead (issue 18's
# single-stream TPOT). Bundles: build/s13a (gpu_bench of 1cc623f, before) and build/s13b (the commit in its
# COMMIT, after). The tests the two kernels touch, the batch-1 and batch-64 decode steps from
# graphs with each binary (gpu_bench model), Nsight Compute's per-kernel times of the new batch-1
# step, and `strata bench serve` at concurrency 1, 4000/500, bf16, full cache and default sparse.
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
for d in s13a s13b; do K=$PWD/build/$d; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; echo "$d: $(head -1 $K/COMMIT)"; done
A=$PWD/build/s13a/bin; B=$PWD/build/s13b/bin; K=$PWD/build/s13b
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -12; }
t attention 150 $B/gpu_attention_test
t kernels 90 $B/gpu_kernels_test
t sampling 90 $B/gpu_sampling_test
t model 200 $B/gpu_model_test
for v in A B; do bin=${!v}; timeout 120 $bin/gpu_bench model > $L/bench_model_$v.log 2>&1; echo "bench model $v rc=$? ($(el) s)"; grep "^decode step" $L/bench_model_$v.log; done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 100 env STRATA_BENCH_NCU=step_b1 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size --csv --log-file $L/ncu_b1.csv $B/gpu_bench model > $L/ncu_b1.log 2>&1; echo "ncu b1 rc=$? ($(el) s)"
C=$B/configs/bench
STRATA_BIN=$B/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="1:6" \
  STRATA_BENCH_BUDGET_S=160 STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-full.yaml $C/llama3-8b-sparse.yaml" \
  timeout 180 $B/bench_serve.sh $L/serve > $L/serve.log 2>&1; echo "serve rc=$? ($(el) s)"
cat $L/serve/table.txt 2>/dev/null
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
