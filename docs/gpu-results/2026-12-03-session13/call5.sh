#!/usr/bin/env bash
# Thirteenth session, call 5 (bundle build/s13b): 8B FP8 weights + the default sparse profile,
# 4000/500 at c = 16 and 64, with the decode GEMM's cluster split (default) and with stream-K
# everywhere (STRATA_DECODE_GEMM_SPLIT=streamk, read by the server): what the split wins in serving.
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
K=$PWD/build/s13b; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -1 $K/COMMIT
C=$B/configs/bench
for mode in cluster streamk; do
  if [ $mode = streamk ]; then export STRATA_DECODE_GEMM_SPLIT=streamk; else unset STRATA_DECODE_GEMM_SPLIT; fi
  STRATA_BIN=$B/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="16:32 64:96" \
    STRATA_BENCH_BUDGET_S=120 STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-sparse-fp8.yaml" \
    timeout 140 $B/bench_serve.sh $L/serve_$mode > $L/serve_$mode.log 2>&1; echo "serve $mode rc=$? ($(el) s)"
  cat $L/serve_$mode/table.txt 2>/dev/null
  grep -h "strata cuda:" $L/serve_$mode/server-*.log | grep -E "fp8|wgmma" | grep -E "T=(16|32|64) " | head -12
done
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
