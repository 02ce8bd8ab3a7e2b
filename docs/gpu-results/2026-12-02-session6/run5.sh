#!/usr/bin/env bash
# Session 6 call 5: defaults (hopper_v5, 16-byte kernels, async bench configs) + the prefix-cache
# pinning fix at 256 requests; the FP8 KV kernels' first run.
set -u
O=$OUT; K=$PWD/build/s6c5; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
timeout 60 $bin/gpu_kv_fp8_test --gtest_color=no > $L/kv_fp8.log 2>&1; echo "kv_fp8 rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|^FIGURE" $L/kv_fp8.log | head -24
STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="1:4 20:20 256:384" STRATA_BENCH_BUDGET_S=$(( 175 - $(el) )) \
  STRATA_BENCH_CONFIG_FILES="configs/bench/llama3-8b-sparse.yaml" bash tools/gpu/bench_serve.sh $O/serve > $L/serve.log 2>&1
echo "serve rc=$? ($(el) s)"; cat $O/serve/table.txt $O/serve/status.txt 2>/dev/null | grep -v "^report" | tail -8
f=$O/serve/server-llama3-8b-sparse.log; grep "engine status" $f | sed -E 's/.*running ([0-9]+), waiting ([0-9]+).*KV ([0-9.]+) %.*/\1 \2 \3/' | sort -n | tail -1 | sed 's/^/max running, waiting, KV%: /'; grep -m2 "prefill attention\|not used" $f
cp $f $L/; rm -f $O/serve/*.svg $O/serve/*/*.svg; cd $O && tar -czf all.tgz logs serve && rm -rf logs serve; echo "total $(el) s"
