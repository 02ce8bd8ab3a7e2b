cd /work/main
A="--model tools/evalmodel/model --backend cpu --contexts 4096 --docs 8 --retrieval 0 --seed 7 --scored-tokens 128 --threads 2 --policies none"
./build/release/bin/strata eval $A --quantization none --out-dir /tmp/qx/fp32 > /tmp/qx/fp32.log 2>&1
./build/release/bin/strata eval $A --quantization fp8 --out-dir /tmp/qx/w8a8 > /tmp/qx/w8a8.log 2>&1
XEXP=w8a16 ./build/release/bin/strata eval $A --quantization fp8 --out-dir /tmp/qx/w8a16 > /tmp/qx/w8a16.log 2>&1
XEXP=a8 ./build/release/bin/strata eval $A --quantization none --out-dir /tmp/qx/a8 > /tmp/qx/a8.log 2>&1
for b in w8a8 w8a16 a8; do echo "== fp32 vs $b"; ./build/release/bin/strata eval --compare /tmp/qx/fp32/eval.json,/tmp/qx/$b/eval.json --out-dir /tmp/qx/cmp_$b 2>&1 | head -8; done
echo ALLDONE
