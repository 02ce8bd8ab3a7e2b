#!/usr/bin/env bash
# Session 6 call 1: never-run GPU tests (#24 async steps, device tables), MixedBatch split by
# variant (#19), then serving with the Hopper v1 prefill kernel (load test), metrics watched.
set -u
O=$OUT; K=$PWD/build/s6c1; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $L/env.log
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; local rc=$?; echo "$name rc=$rc ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure" $L/$name.log | head -6; }
t async_steps 150 $bin/gpu_async_steps_test
t device_tables 60 $bin/gpu_device_tables_test
for k in hopper hopper_v5 hopper_lpt; do STRATA_PREFILL_ATTN=$k t mixed-$k 60 $bin/gpu_sparse_model_test --gtest_filter='*MixedBatch*'; done
STRATA_PREFILL_FUSION=1 t mixed-fa2-fusion 60 $bin/gpu_sparse_model_test --gtest_filter='*MixedBatch*'
STRATA_PREFILL_ATTN=hopper t model-hopper 90 $bin/gpu_model_test
watch() { while true; do f=$(ls $O/serve/server-*.log 2>/dev/null | tail -1); p=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$f" 2>/dev/null | tail -1)
  if [ -n "$p" ] && exec 3<>/dev/tcp/127.0.0.1/$p; then printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; echo "== $(el) s"; grep -E "^(strata_engine_steps_total|strata_gpu_(idle|busy)_seconds_total|strata_kv_pages_used|strata_quality_replays_total|strata_num_requests_preempted|vllm:num_requests_(running|waiting))" <&3 | grep -v "{.*le=" ; exec 3<&-; fi; sleep 5; done; }
watch > $L/watch.log 2>&1 & wp=$!
echo "serving hopper at $(el) s"
STRATA_PREFILL_ATTN=hopper STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="1:4 20:20 256:384" STRATA_BENCH_BUDGET_S=$(( 560 - $(el) )) \
  STRATA_BENCH_CONFIG_FILES="configs/bench/llama3-8b-sparse.yaml" bash tools/gpu/bench_serve.sh $O/serve > $L/serve.log 2>&1
echo "serve rc=$?"; cat $O/serve/table.txt $O/serve/status.txt 2>/dev/null | tail -12
kill $wp; rm -f $O/serve/*.svg $O/serve/*/*.svg; cp $O/serve/server-*.log $L/ 2>/dev/null; tail -5 $L/watch.log
cd $O && tar -czf all.tgz logs serve && rm -rf logs serve; echo "total $(el) s"
