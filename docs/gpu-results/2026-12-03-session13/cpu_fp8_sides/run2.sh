cd /work/main
A="--model tools/evalmodel/model --backend cpu --contexts 4096 --docs 8 --retrieval 0 --seed 7 --scored-tokens 128 --threads 2 --policies none"
for g in qkv o gate_up down; do
  XSKIP=$g ./build/release/bin/strata eval $A --quantization fp8 --out-dir /tmp/qx/skip_$g > /tmp/qx/skip_$g.log 2>&1
  echo "== fp32 vs W8A8 with $g unquantized"; ./build/release/bin/strata eval --compare /tmp/qx/fp32/eval.json,/tmp/qx/skip_$g/eval.json --out-dir /tmp/qx/cmp_skip_$g 2>&1 | sed -n 2p
done
echo ALLDONE
