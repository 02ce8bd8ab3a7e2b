#!/usr/bin/env bash
# Session 7 call 1: GPU tests of 832f03a (new defaults, fp8-KV wiring, RoPE mend), gpu_kv_fp8_test model cases,
# decode/sparse step figures, then 256/256 at c=256 (issue 24's idle <= 5 %), metrics watched.
set -u
O=$OUT; K=$PWD/build/s7c1; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $L/env.log
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; local rc=$?; echo "$name rc=$rc ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -6; }
t kv_fp8 150 $bin/gpu_kv_fp8_test
grep -hE "FIGURE|bound|agree" $L/kv_fp8.log | head -20
t kernels 90 $bin/gpu_kernels_test
t attention 90 $bin/gpu_attention_test
t model 150 $bin/gpu_model_test
t sparse_model 150 $bin/gpu_sparse_model_test
timeout 100 $bin/gpu_bench model > $L/bench-model.log 2>&1; echo "bench model rc=$? ($(el) s)"; grep -iE "decode step|prefill" $L/bench-model.log | head -8
timeout 60 $bin/gpu_bench sparse > $L/bench-sparse.log 2>&1; echo "bench sparse rc=$? ($(el) s)"; grep -iE "decode step" $L/bench-sparse.log | head -6
watch() { while true; do f=$(ls -t $O/serve*/server-*.log 2>/dev/null | head -1); p=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$f" 2>/dev/null | tail -1)
  if [ -n "$p" ] && exec 3<>/dev/tcp/127.0.0.1/$p; then printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; echo "== $(el) s"; grep -E "^(strata_engine_steps_total|strata_gpu_(idle|busy)_seconds_total|strata_gpu_idle_ratio|vllm:num_requests_(running|waiting))" <&3; exec 3<&-; fi; sleep 5; done; }
watch > $L/watch.log 2>&1 & wp=$!
sv() { local d=$1 cfg=$2 lv=$3 b=$4 in=$5 out=$6; STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_INPUT=$in STRATA_BENCH_OUTPUT=$out \
  STRATA_BENCH_CONFIG_FILES="configs/bench/$cfg.yaml" bash tools/gpu/bench_serve.sh $O/$d > $L/$d.log 2>&1
  echo "$d rc=$? ($(el) s)"; cat $O/$d/table.txt $O/$d/status.txt 2>/dev/null | grep -v "^report" | tail -5; cp $O/$d/server-*.log $L/$d-server.log; }
b=$(( 560 - $(el) )); [ $b -gt 40 ] && sv s256 llama3-8b-sparse "256:512" $b 256 256
kill $wp; rm -f $O/serve*/*.svg $O/s256/*.svg $O/s256/*/*.svg
cd $O && tar -czf all.tgz logs s256 2>/dev/null; rm -rf logs s256; echo "total $(el) s"
