#!/usr/bin/env bash
# Session 7 call 4 (binaries of call 3, 40cb64e): sparse 4000/500 at c=256 with the defaults (hopper_v5 +
# 16-byte kernels), with hopper_v6, and with fa2 + scalar kernels (issue 19's prediction check).
set -u
O=$OUT; K=$PWD/build/s7c3; [ -x $K/bin/strata ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
sv() { local d=$1 lv=$2 b=$3; STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$b \
  STRATA_BENCH_CONFIG_FILES="configs/bench/llama3-8b-sparse.yaml" bash tools/gpu/bench_serve.sh $O/sv-$d > $L/$d.log 2>&1
  echo "$d rc=$? ($(el) s)"; cat $O/sv-$d/table.txt $O/sv-$d/status.txt 2>/dev/null | grep -v "^report" | tail -4; grep "engine status" $O/sv-$d/server-*.log | tail -1 | cut -c1-400; cp $O/sv-$d/server-*.log $L/$d-server.log; cp $O/sv-$d/table.txt $L/$d-table.txt; }
sv v5 "256:384" 130
STRATA_PREFILL_ATTN=hopper_v6 sv v6 "256:384" 130
STRATA_PREFILL_ATTN=fa2 STRATA_PREFILL_FUSION=0 sv fa2scalar "256:384" 130
cd $O && tar -czf all.tgz logs; rm -rf logs sv-*; echo "total $(el) s"
