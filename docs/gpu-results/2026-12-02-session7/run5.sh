#!/usr/bin/env bash
# Session 7 call 5 (binaries of call 3, 40cb64e): TTFT at c=20 in steady state, sparse and full (issue 24).
set -u
O=$OUT; K=$PWD/build/s7c3; [ -x $K/bin/strata ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="20:40" STRATA_BENCH_BUDGET_S=200 \
  STRATA_BENCH_CONFIG_FILES="configs/bench/llama3-8b-sparse.yaml configs/bench/llama3-8b-full.yaml" bash tools/gpu/bench_serve.sh $O/sv > $L/c20.log 2>&1
echo "c20 rc=$? ($(el) s)"; cat $O/sv/table.txt $O/sv/status.txt 2>/dev/null | grep -v "^report"; cp $O/sv/server-*.log $O/sv/table.txt $L/
cd $O && tar -czf all.tgz logs; rm -rf logs sv; echo "total $(el) s"
