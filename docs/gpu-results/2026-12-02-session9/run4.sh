#!/usr/bin/env bash
# Call 4 of the ninth session (the budget's last ~340 s): 4000/500 at c = 128, the default sparse
# profile with bf16 KV beside fp8 KV (call 2's sweeps gave each configuration too little time).
set -u
O=$OUT; K=$PWD/build/s9c1; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
C=$bin/configs/bench
STRATA_KV_FP8_SPARSE=1 STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json \
  STRATA_BENCH_LEVELS="128:256" STRATA_BENCH_BUDGET_S=${BUDGET:-150} \
  STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-sparse.yaml $C/llama3-8b-sparse-kvfp8.yaml" \
  timeout 200 $bin/bench_serve.sh $L/sparse4k > $L/sparse4k.log 2>&1; echo "sparse4k rc=$?"
cat $L/sparse4k/table.txt $L/sparse4k/status.txt 2>/dev/null
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(( $(date +%s) - t0 )) s"
