#!/usr/bin/env bash
# Call 3 of the tenth session: the split-K-in-block FP8 GEMM (kWarpK, first GPU run): its oracle
# tests (PDL on and off), the PDL chain / graph test, the autotune gate; the layer-GEMM benches
# beside the other paths; then 8B FP8 sparse serving at c = 1 and 16 with it (autotuned) and
# without it (STRATA_FP8_WARPK=off).
set -u
O=$OUT; K=$PWD/build/s10b; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
LIM=${LIM:-380}
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|warpk" $L/$name.log | head -12; }
b() { local name=$1 to=$2; shift 2; timeout $to "$@" > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; }
cat $K/COMMIT
t fp8_gemms 100 $bin/gpu_fp8_test --gtest_filter='GpuFp8.GemmsMatchOracle:GpuFp8.WarpKChainWithPdlEqualsEagerAndGraph'
t decode_fp8_gate 60 $bin/gpu_gemm_decode_fp8_test --gtest_filter='*GemmRoutesAndAutotuneGate*'
b gemm_fp8 75 $bin/gpu_bench gemm-fp8; grep -E "^layer GEMMs T=(1|2|4|8|16|32|64) " $L/gemm_fp8.log | grep -E "bf16|cores|mma |cublasLt|warpk" | head -40
b gemm_decode 75 $bin/gpu_bench gemm-decode; grep -E "^fp8 " $L/gemm_decode.log | head -30
C=$bin/configs/bench
sv() { local d=$1 b=$2; shift 2; env "$@" STRATA_BIN=$bin/strata STRATA_BENCH_TOKENIZER=$K/tokenizer.json \
  STRATA_BENCH_LEVELS="1:3 16:32" STRATA_BENCH_BUDGET_S=$b STRATA_BENCH_CONFIG_FILES="$C/llama3-8b-sparse-fp8.yaml" \
  timeout $((b + 20)) $bin/bench_serve.sh $L/$d > $L/$d.log 2>&1; echo "$d rc=$? ($(el) s)"; cat $L/$d/table.txt 2>/dev/null; }
left=$(( LIM - $(el) ))
if [ $left -gt 100 ]; then
  sv serve_warpk $(( left / 2 - 15 )) STRATA_FP8_WARPK=on
  sv serve_nowarpk $(( LIM - $(el) - 20 )) STRATA_FP8_WARPK=off
  grep -h "autotune\|warpk" $L/serve_warpk/*.log 2>/dev/null | grep -E "T=(1|16) " | head -12
fi
cd $O && tar -czf all.tgz logs; rm -rf logs; echo "total $(el) s"
