#!/usr/bin/env bash
# Call 5: call 4 again with a prompt seed per level (tools/gpu/bench_serve.sh of the working tree:
# call 4's c = 256 level re-sent the c = 128 level's prompts and 37 % of its prompt tokens were
# prefix-cache hits). FP8 weights + fp8 KV + the default sparse profile, 4000/500: with the stage
# at c = 128 then 256, without it (STRATA_FP8_PREFILL_STAGE=0) at c = 256.
set -u
O=$OUT; K=$PWD/build/s11; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
C=$bin/configs/bench
sv() { local d=$1 b=$2 lv=$3; shift 3; env "$@" STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json \
  STRATA_BENCH_INPUT=4000 STRATA_BENCH_OUTPUT=500 STRATA_BENCH_LEVELS="$lv" \
  STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-fp8-sparse-kvfp8.yaml" \
  timeout $((b + 20)) $PWD/tools/gpu/bench_serve.sh $L/$d > $L/$d.log 2>&1; echo "$d rc=$? ($(el) s)"; cat $L/$d/table.txt $L/$d/status.txt 2>/dev/null; }
sv stage 170 "128:256 256:384" STRATA_FP8_PREFILL_STAGE=1
sv nostage 100 "256:384" STRATA_FP8_PREFILL_STAGE=0
for f in $L/*/*-c*/report.json; do echo "$f $(grep -o '"vllm:prefix_cache_hits_total":[0-9.E]*' $f)"; done
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
