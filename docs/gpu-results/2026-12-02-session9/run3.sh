#!/usr/bin/env bash
# Call 3 of the ninth session: FP8 weights + fp8 KV with the default sparse profile beside FP8
# weights + bf16 KV (issue 21's >= 6,000 tok/s at the best concurrency), then Llama-3-70B FP8
# (issue 20, never run before).
set -u
O=$OUT; K=$PWD/build/s9c1; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
C=$bin/configs/bench
sv() { local d=$1 cfgs=$2 lv=$3 b=$4; STRATA_KV_FP8_SPARSE=1 STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json \
  STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_CONFIG_FILES="$cfgs" \
  timeout $((b + 40)) $bin/bench_serve.sh $L/$d > $L/$d.log 2>&1; echo "$d rc=$? ($(el) s)"; cat $L/$d/table.txt $L/$d/status.txt 2>/dev/null; }
sv fp8w "$C/llama3-8b-sparse-fp8.yaml $C/llama3-8b-fp8-sparse-kvfp8.yaml" "128:256 256:512" 260
sv 70b "$C/llama3-70b-fp8-full.yaml $C/llama3-70b-fp8-sparse.yaml" "1:2 16:32 64:64" $(( 500 - $(el) ))
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
