#!/usr/bin/env bash
# Call 4: FP8 weights + fp8 KV + the default sparse profile, 4000/500 at c = 128 and 256, with the
# Hopper prefill over the stage and without it (STRATA_FP8_PREFILL_STAGE=0) in the same call.
set -u
O=$OUT; K=$PWD/build/s11; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
C=$bin/configs/bench
sv() { local d=$1 b=$2; shift 2; env "$@" STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json \
  STRATA_BENCH_INPUT=4000 STRATA_BENCH_OUTPUT=500 STRATA_BENCH_LEVELS="128:256 256:384" \
  STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-fp8-sparse-kvfp8.yaml" \
  timeout $((b + 20)) $bin/bench_serve.sh $L/$d > $L/$d.log 2>&1; echo "$d rc=$? ($(el) s)"; cat $L/$d/table.txt $L/$d/status.txt 2>/dev/null; }
sv stage 160 STRATA_FP8_PREFILL_STAGE=1
sv nostage 160 STRATA_FP8_PREFILL_STAGE=0
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
