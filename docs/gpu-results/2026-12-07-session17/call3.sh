#!/usr/bin/env bash
# Seventeenth session, call 3 (on call 2's warm machine, its bundle build/s17c): the sparse step's
# leave-one-out under the new defaults, with the RoPE table on and off.
K=$PWD/build/s17c; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; for rt in 1 0; do STRATA_ROPE_TABLE=$rt timeout 40 $K/bin/gpu_bench sparse-loo > $OUT/loo_rt$rt.log 2>&1; echo "rt=$rt rc=$?"; grep -E "^sparse step|rope|argmax|embedding|sum to" $OUT/loo_rt$rt.log | sed 's/_ZN6strata4cuda43_GLOBAL__N__16d7582a_10_kernels_cu_95c3b97b//' | cut -c1-160; done
