#!/usr/bin/env bash
# Call 2: 4000/500 c = 256 (384 measured): the default sparse profile on fp8 KV with the Hopper
# prefill over the stage (bf16 weights, then FP8 weights: issue 21's >= 6,000), FP8 weights on
# bf16 KV beside them, then bf16 weights on fp8 KV with STRATA_FP8_PREFILL_STAGE=0 (FA2 on the
# codes, the tenth session's path) in the same call.
set -u
O=$OUT; K=$PWD/build/s11; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
C=$bin/configs/bench
sv() { local d=$1 b=$2 cf=$3; shift 3; env "$@" STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json \
  STRATA_BENCH_INPUT=${INPUT:-4000} STRATA_BENCH_OUTPUT=500 STRATA_BENCH_LEVELS="${LEVELS:-256:384}" \
  STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_CONFIG_FILES="$cf" \
  timeout $((b + 20)) $bin/bench_serve.sh $L/$d > $L/$d.log 2>&1; echo "$d rc=$? ($(el) s)"; cat $L/$d/table.txt $L/$d/status.txt 2>/dev/null; }
sv stage 390 "$C/llama3-8b-sparse-kvfp8.yaml $C/llama3-8b-fp8-sparse-kvfp8.yaml $C/llama3-8b-sparse-fp8.yaml" STRATA_FP8_PREFILL_STAGE=1
sv nostage $(( 540 - $(el) )) "$C/llama3-8b-sparse-kvfp8.yaml" STRATA_FP8_PREFILL_STAGE=0
grep -h "prefill attention\|stage" $L/*/server-*.log 2>/dev/null | sort | uniq -c | head
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
