#!/usr/bin/env bash
# Call 5 (fifth session, last): issue 19's Hopper variants A/B, the prefill fusion, the breakdown,
# then serving with the best passing variant. Every variant in its own process (a trap or hang in
# one cannot poison the others).
set -u
O=$OUT; K=$PWD/build/kab5; tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; cat $K/COMMIT; } > $O/env.log
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump) sh tests/scripts/cuda_hopper_sass.sh $bin/gpu_attention_test > $O/sass.log 2>&1; echo "sass rc=$?"; grep -c HGMMA $O/sass.log; grep " 0 HGMMA\|LDL/STL" $O/sass.log | grep -v " 0 LDL" | head
pass=""
for k in ${VARIANTS:-hopper hopper_v2 hopper_v3 hopper_v4 hopper_v5 hopper_lpt}; do
  STRATA_ATTN_KERNELS=$k timeout 60 $bin/gpu_attention_test --gtest_filter='GpuAttention.Prefill*' --gtest_color=no > $O/attn-$k.log 2>&1; rc=$?
  STRATA_ATTN_KERNELS=$k timeout 40 $bin/gpu_bench prefill-attn > $O/bench-$k.log 2>&1; brc=$?
  b1=$(awk '/^FIGURE bench_prefill_attn_b1_/{print $3}' $O/bench-$k.log); b8=$(awk '/^FIGURE bench_prefill_attn_b8_/{print $3}' $O/bench-$k.log); ch=$(awk '/^FIGURE bench_prefill_attn_chunk/{print $3}' $O/bench-$k.log)
  echo "variant $k: test rc=$rc bench rc=$brc b1=$b1 b8=$b8 chunk=$ch ($(el) s)"
  grep -h "Failure\|FAILED  \]\|rel_l2_${k}_.*ragged" $O/attn-$k.log | head -4
  [ $rc -eq 0 ] && [ $brc -eq 0 ] && [ -n "$b1" ] && pass="$pass $k:$b1:$b8"
done
best=hopper; bestv=0
for e in $pass; do k=${e%%:*}; r=${e#*:}; b1=${r%%:*}; b8=${r#*:}; v=$(awk -v a=$b1 -v b=$b8 'BEGIN{print a+b}'); if awk -v a=$v -v b=$bestv 'BEGIN{exit !(a>b)}'; then best=$k; bestv=$v; fi; done
echo "best variant: $best"
timeout 60 $bin/gpu_kernels_test --gtest_color=no > $O/kernels_test.log 2>&1; krc=$?; echo "kernels_test rc=$krc"; grep -E "FAILED|Failure" $O/kernels_test.log | head -5
fus=0
STRATA_PREFILL_ATTN=$best STRATA_PREFILL_FUSION=1 timeout 90 $bin/gpu_model_test --gtest_color=no > $O/model_test.log 2>&1; mrc=$?; echo "model_test ($best, fusion) rc=$mrc"; grep -E "^\[  FAILED" $O/model_test.log | head
STRATA_PREFILL_ATTN=$best STRATA_PREFILL_FUSION=1 timeout 150 $bin/gpu_sparse_model_test --gtest_color=no > $O/sparse_test.log 2>&1; src=$?; echo "sparse_model_test ($best, fusion) rc=$src ($(el) s)"; grep -E "^\[  FAILED" $O/sparse_test.log | head
[ $krc -eq 0 ] && [ $mrc -eq 0 ] && [ $src -eq 0 ] && fus=1
STRATA_PREFILL_ATTN=$best timeout 90 $bin/gpu_bench prefill-breakdown > $O/breakdown.log 2>&1; echo "breakdown rc=$?"; grep -v "^FIGURE" $O/breakdown.log | tail -40
for f in 0 1; do STRATA_PREFILL_ATTN=$best STRATA_PREFILL_FUSION=$f timeout 60 $bin/gpu_bench model > $O/model-f$f.log 2>&1; echo "model fusion=$f: $(grep 'prefill 4000' $O/model-f$f.log)"; done
echo "serving with STRATA_PREFILL_ATTN=$best STRATA_PREFILL_FUSION=$fus at $(el) s"
lv="1:4 20:20 256:384"; [ $(el) -gt 280 ] && lv="1:4 256:256"
STRATA_PREFILL_ATTN=$best STRATA_PREFILL_FUSION=$fus STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json STRATA_BENCH_LEVELS="$lv" STRATA_BENCH_BUDGET_S=$(( 480 - $(el) )) \
  STRATA_BENCH_CONFIG_FILES="configs/bench/llama3-8b-sparse.yaml" bash tools/gpu/bench_serve.sh $O/serve > $O/serve.log 2>&1
echo "serve rc=$?"; cat $O/serve/table.txt $O/serve/status.txt 2>/dev/null | tail -12
rm -f $O/serve/*.svg $O/serve/*/*.svg; echo "total $(el) s"
