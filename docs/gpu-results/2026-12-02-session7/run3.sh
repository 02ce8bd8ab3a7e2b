#!/usr/bin/env bash
# Session 7 call 3: decode fusion (tests + b1 step), the 8B fp8-KV model case, then serving with async on by
# default and the sync-step metrics: full c=128, sparse c=128 (4000/500), sparse 256/256 c=256, c=1 fusion 0 vs 2.
set -u
O=$OUT; K=$PWD/build/s7c3; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $L/env.log
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; local rc=$?; echo "$name rc=$rc ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -6; }
t skinny 60 $bin/gpu_gemm_skinny_test
t model_fusion 100 $bin/gpu_model_test --gtest_filter='*DecodeFusion*'
t kv_fp8_8b 100 $bin/gpu_kv_fp8_test --gtest_filter='GpuKvFp8.Llama8B*'
timeout 100 $bin/gpu_bench model > $L/bench_model.log 2>&1; echo "bench model rc=$? ($(el) s)"; grep -iE "decode step|prefill" $L/bench_model.log | grep -v "^FIGURE" | head -8
watch() { while true; do f=$(ls -t $O/sv-*/server-*.log 2>/dev/null | head -1); p=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$f" 2>/dev/null | tail -1)
  if [ -n "$p" ] && exec 3<>/dev/tcp/127.0.0.1/$p; then printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; echo "== $(el) s $f"; grep -E "^(strata_engine_steps_total|strata_gpu_(idle|busy)_seconds_total|strata_sync_steps_total|strata_gpu_idle_by_reason_seconds_total|strata_engine_steps_by_kind_total)" <&3; exec 3<&-; fi; sleep 5; done; }
watch > $L/watch.log 2>&1 & wp=$!
sv() { local d=$1 cfg=$2 lv=$3 b=$4 in=$5 out=$6; STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_INPUT=$in STRATA_BENCH_OUTPUT=$out \
  STRATA_BENCH_CONFIG_FILES="configs/bench/$cfg.yaml" bash tools/gpu/bench_serve.sh $O/sv-$d > $L/$d.log 2>&1
  echo "$d rc=$? ($(el) s)"; cat $O/sv-$d/table.txt $O/sv-$d/status.txt 2>/dev/null | grep -v "^report" | tail -4; grep "engine status" $O/sv-$d/server-*.log | tail -2 | cut -c1-400; cp $O/sv-$d/server-*.log $L/$d-server.log; cp $O/sv-$d/table.txt $L/$d-table.txt; }
sv full128 llama3-8b-full "128:192" 150 4000 500
sv sparse128 llama3-8b-sparse "128:192" 110 4000 500
sv s256short llama3-8b-sparse "256:512" 50 256 256
[ $(el) -lt 500 ] && STRATA_DECODE_FUSION=2 sv c1fusion2 llama3-8b-sparse "1:4" 45 4000 500
[ $(el) -lt 540 ] && STRATA_DECODE_FUSION=0 sv c1fusion0 llama3-8b-sparse "1:4" 45 4000 500
kill $wp
cd $O && tar -czf all.tgz logs; rm -rf logs sv-*; echo "total $(el) s"
