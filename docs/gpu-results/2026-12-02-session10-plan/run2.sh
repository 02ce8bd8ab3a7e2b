#!/usr/bin/env bash
# Planned call 2: 4000/500 c = 256, bf16 KV vs fp8 KV, full and sparse (four servers).
set -u
O=$OUT; K=$PWD/build/s10; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
C=$bin/configs/bench
STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_INPUT=${INPUT:-4000} \
  STRATA_BENCH_OUTPUT=500 STRATA_BENCH_LEVELS="${LEVELS:-256:384}" STRATA_BENCH_BUDGET_S=${BUDGET:-500} \
  STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-full.yaml $C/llama3-8b-full-kvfp8.yaml $C/llama3-8b-sparse.yaml $C/llama3-8b-sparse-kvfp8.yaml" \
  timeout $(( ${BUDGET:-500} + 20 )) $bin/bench_serve.sh $L/sweep > $L/sweep.log 2>&1; echo "sweep rc=$?"
cat $L/sweep/table.txt $L/sweep/status.txt 2>/dev/null
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(( $(date +%s) - t0 )) s"
