#!/usr/bin/env bash
# Session 6 call 2: which change makes c=256 crawl (2 steps/s)? 4 variants x ~75 s of c=256.
set -u
O=$OUT; K=$PWD/build/s6c1; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; T=$K/tokenizer.json; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
. tools/gpu/server_lib.sh
metric() { exec 3<>/dev/tcp/127.0.0.1/$port || return; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; grep -E "^$1" <&3 | head -1 | awk '{print $NF}'; exec 3<&-; }
variant() { local name=$1; shift
  env "$@" $bin/strata serve --config configs/bench/llama3-8b-sparse.yaml --port 0 --set model.tokenizer=$T ${SETS:-} > $L/server-$name.log 2>&1 & server_pid=$!
  wait_ready $L/server-$name.log 120 1 || { echo "$name: not ready"; stop_server; return; }
  $bin/strata bench serve --host 127.0.0.1 --port $port --input 4000 --output 500 --concurrency 256 --num-prompts 512 --out-dir $L/b-$name > $L/bench-$name.log 2>&1 & bp=$!
  sleep 20; s0=$(metric strata_engine_steps_total); i0=$(metric strata_gpu_idle_seconds_total); 
  top -b -n1 -H -p $server_pid | head -20 > $L/top-$name.txt
  command -v gdb >/dev/null && timeout 30 gdb -p $server_pid -batch -ex "thread apply all bt 12" > $L/gdb-$name.txt 2>&1
  sleep 25; s1=$(metric strata_engine_steps_total); i1=$(metric strata_gpu_idle_seconds_total)
  echo "$name: steps/s $(awk -v a=$s0 -v b=$s1 'BEGIN{print (b-a)/25}') idle/s $(awk -v a=$i0 -v b=$i1 'BEGIN{print (b-a)/25}') ($(el) s)"
  grep "engine status" $L/server-$name.log | tail -2 | cut -c1-200
  kill $bp 2>/dev/null; stop_server; }
variant fa2 STRATA_PREFILL_ATTN=fa2
variant hopper STRATA_PREFILL_ATTN=hopper
SETS="--set cache.prefix_cache=false" variant hopper-nopc STRATA_PREFILL_ATTN=hopper
SETS="--set quality_monitor.sample_rate=0" variant hopper-norep STRATA_PREFILL_ATTN=hopper
SETS="--set cache.prefix_cache=false" variant fa2-nopc STRATA_PREFILL_ATTN=fa2
cd $O && tar -czf all.tgz logs && rm -rf logs; echo "total $(el) s"
