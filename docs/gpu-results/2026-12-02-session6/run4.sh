#!/usr/bin/env bash
set -u
O=$OUT; K=$PWD/build/s6c3; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
sv() { local d=$1 cfg=$2 lv=$3 b=$4; STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_SERVE_ARGS="--set scheduler.async_steps=true" \
  STRATA_BENCH_CONFIG_FILES="configs/bench/$cfg.yaml" bash tools/gpu/bench_serve.sh $O/$d > $L/$d.log 2>&1
  echo "$d rc=$? ($(el) s)"; cat $O/$d/table.txt $O/$d/status.txt 2>/dev/null | grep -v "^report" | tail -5; cp $O/$d/server-*.log $L/$d-server.log; }
STRATA_PREFILL_ATTN=hopper_v5 STRATA_PREFILL_FUSION=1 sv sparse-v5-fusion llama3-8b-sparse "256:256" 130
STRATA_PREFILL_ATTN=hopper sv full-async llama3-8b-full "128:192" $(( 290 - $(el) ))
rm -f $O/*/*.svg $O/*/*/*.svg; cd $O && tar -czf all.tgz logs sparse-v5-fusion full-async; rm -rf logs sparse-v5-fusion full-async; echo "total $(el) s"
