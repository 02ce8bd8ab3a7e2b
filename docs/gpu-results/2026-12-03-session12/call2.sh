#!/usr/bin/env bash
# Twelfth session, call 2 (the eleventh session's planned run7, unchanged but for this line): what the eleventh
# session changed after its GPU calls — autotune_fp8 checks its candidates against the rule
# before kWarpK and reports kWarpK's default time; `strata bench serve` levels with their own
# seeds — then 8B FP8 sparse serving at c = 1 / 16 / 64 on one server (levels now share no prompt).
# Bundle: a build of the landed commit packed as build/s12 (tools/gpu/pack.sh build/release
# build/s12 gpu_fp8_test gpu_gemm_decode_fp8_test gpu_kv_fp8_test).
set -u
O=$OUT; K=$PWD/build/${BUNDLE:-s12}; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -12; }
cat $K/COMMIT
t gemm_decode_fp8 60 $bin/gpu_gemm_decode_fp8_test
t fp8 150 $bin/gpu_fp8_test
C=$bin/configs/bench
STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="1:3 16:32 64:128" \
  STRATA_BENCH_BUDGET_S=200 STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-sparse-fp8.yaml" \
  timeout 220 $bin/bench_serve.sh $L/serve > $L/serve.log 2>&1; echo "serve rc=$? ($(el) s)"
cat $L/serve/table.txt 2>/dev/null
grep -h "strata cuda:" $L/serve/server-*.log | grep -E "T=(1|8|16) " | head -12
for f in $L/serve/*-c*/report.json; do echo "$f $(grep -o '"vllm:prefix_cache_hits_total":[0-9.E]*' $f)"; done
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
