#!/usr/bin/env bash
# Call 3: 16000/500 c = 64 (64 measured), bf16 weights: full, full fp8 KV, sparse, sparse fp8 KV
# (issue 21's 16k sweep, fp8 KV beside bf16 KV in the same run; fp8 prefill through the stage).
set -u
O=$OUT; K=$PWD/build/s11; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
C=$bin/configs/bench
STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_INPUT=16000 \
  STRATA_BENCH_OUTPUT=500 STRATA_BENCH_LEVELS="${LEVELS:-64:64}" STRATA_BENCH_BUDGET_S=${BUDGET:-520} \
  STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-full.yaml $C/llama3-8b-full-kvfp8.yaml $C/llama3-8b-sparse.yaml $C/llama3-8b-sparse-kvfp8.yaml" \
  timeout $(( ${BUDGET:-520} + 20 )) $bin/bench_serve.sh $L/sweep > $L/sweep.log 2>&1; echo "sweep rc=$?"
cat $L/sweep/table.txt $L/sweep/status.txt 2>/dev/null
cd $O && tar -czf all.tgz logs; echo "total $(( $(date +%s) - t0 )) s"
