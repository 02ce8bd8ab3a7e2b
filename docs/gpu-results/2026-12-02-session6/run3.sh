#!/usr/bin/env bash
# Session 6 call 3: the census fix at 256 requests (hopper prefill), async_steps test and serving.
set -u
O=$OUT; K=$PWD/build/s6c3; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $L/env.log
timeout 120 $bin/gpu_async_steps_test --gtest_color=no > $L/async_steps.log 2>&1; echo "async_steps rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|engine:" $L/async_steps.log | head -12
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; local rc=$?; echo "$name rc=$rc ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -6; }
t kernels 90 $bin/gpu_kernels_test
grep -hE "resid_|rows_differ" $L/kernels.log | head -12
STRATA_PREFILL_FUSION=1 t mixed-fusion 60 $bin/gpu_sparse_model_test --gtest_filter='*MixedBatch*'
grep -hE "mixed_vs_alone|first_row" $L/mixed-fusion.log | head -6
t mixed 60 $bin/gpu_sparse_model_test --gtest_filter='*MixedBatch*'
STRATA_PREFILL_FUSION=1 t model-fusion 90 $bin/gpu_model_test
grep -hE "fused_vs_unfused" $L/model-fusion.log | head -4
STRATA_PREFILL_ATTN=hopper_v5 timeout 120 $bin/gpu_bench prefill-breakdown > $L/breakdown.log 2>&1; echo "breakdown rc=$? ($(el) s)"; grep -v "^FIGURE" $L/breakdown.log | grep -E "GEMM \+ attention|rmsnorm|gemm_o|gemm_down|scalar|vec|fused" | head -16
watch() { while true; do f=$(ls -t $O/serve*/server-*.log 2>/dev/null | head -1); p=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$f" 2>/dev/null | tail -1)
  if [ -n "$p" ] && exec 3<>/dev/tcp/127.0.0.1/$p; then printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; echo "== $(el) s"; grep -E "^(strata_engine_steps_total|strata_gpu_(idle|busy)_seconds_total)" <&3; exec 3<&-; fi; sleep 5; done; }
watch > $L/watch.log 2>&1 & wp=$!
sv() { local d=$1 lv=$2 b=$3; STRATA_PREFILL_ATTN=hopper STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_SERVE_ARGS="${4:-}" \
  STRATA_BENCH_CONFIG_FILES="configs/bench/llama3-8b-sparse.yaml" bash tools/gpu/bench_serve.sh $O/$d > $L/$d.log 2>&1
  echo "$d rc=$? ($(el) s)"; cat $O/$d/table.txt $O/$d/status.txt 2>/dev/null | grep -v "^report" | tail -8; cp $O/$d/server-*.log $L/$d-server.log; }
sv serve "1:4 20:20 256:384" $(( 200 + $(el) > 430 ? 430 - $(el) : 200 ))
[ $(el) -lt 440 ] && sv serve-async "256:256" $(( 530 - $(el) )) "--set scheduler.async_steps=true"
kill $wp; rm -f $O/serve*/*.svg $O/serve*/*/*.svg
cd $O && tar -czf all.tgz logs serve serve-async && rm -rf logs serve serve-async; echo "total $(el) s"
