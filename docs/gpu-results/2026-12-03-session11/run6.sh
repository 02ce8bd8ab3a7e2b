#!/usr/bin/env bash
# Call 6 (the session's last ~120 s of device time): FP8 weights (W8A8) vs bf16 on the evaluation
# model through the CUDA backend, issue 20's quality bar (first GPU run): full cache, then scored
# at 4x with layer 0 full. Same sample as call 1's fp8 KV run.
set -u
O=$OUT; K=$PWD/build/${BUNDLE:-s11}; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; bin=$K/bin; t0=$(date +%s); L=$O/logs; mkdir -p $L
A=(--model $K/evalmodel/model --backend cuda --contexts 4096 --docs 32 --retrieval 200 --seed 7 --scored-tokens 128)
e() { local n=$1; shift; timeout 60 $bin/strata eval "${A[@]}" "$@" --out-dir $L/$n > $L/$n.log 2>&1; echo "$n rc=$? ($(( $(date +%s) - t0 )) s)"; }
cmp() { $bin/strata eval --compare $L/$1/eval.json,$L/$2/eval.json --out-dir $L/cmp_$2 2>&1 | head -12; }
e full_bf16 --policies none --quantization none
e full_fp8 --policies none --quantization fp8
cmp full_bf16 full_fp8
e scored_bf16 --policies scored --full-layers 1 --ratios 4 --quantization none
e scored_fp8 --policies scored --full-layers 1 --ratios 4 --quantization fp8
cmp scored_bf16 scored_fp8
echo "total $(( $(date +%s) - t0 )) s"
