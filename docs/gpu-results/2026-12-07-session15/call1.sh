#!/usr/bin/env bash
# Fifteenth session, call 1 (bundle build/s15b): the fourteenth session's call 3 (never run: start
# refusals) plus the ring resolve inside the RoPE + K/V write (on by default in this build).
#  - the card's copy ceiling (the tool gives H100 or H200: ratios against this);
#  - gpu_sparse_kernels_test SparseDecode.* : case 4 (in-kernel update bit for bit vs logits +
#    update kernel; the odd-stride misalignment fixed by rounding the rows) and the RoPE write
#    with the resolve vs the resolve kernel + plain write (bf16 scalar / 16-byte, e4m3);
#    compute-sanitizer if it fails;
#  - gpu_sparse_model_test (all: the switches bitwise vs the kernels path, 5 variants);
#  - gpu_kernels_test, gpu_kv_fp8_test sparse + tiny (the RoPE kernels' other users);
#  - gpu_bench sparse (7 variants), gpu_attention_test Decode*, gpu_bench decode-attn,
#    gpu_bench model (full-cache and batch-1 steps).
set -u
O=$OUT; t0=$(date +%s); L=$O/logs; mkdir -p $L
el() { echo $(( $(date +%s) - t0 )); }
K=$PWD/build/s15b; [ -d $K/bin ] || tar -xJf $K/b.tar.xz -C $K; B=$K/bin; head -3 $K/COMMIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t() { local name=$1 to=$2; shift 2; timeout $to "$@" --gtest_color=no > $L/$name.log 2>&1; echo "$name rc=$? ($(el) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|does not fit|RoPE \+ resolve" $L/$name.log | head -14; }
timeout 60 $B/gpu_bench copy > $L/copy.log 2>&1; grep -iE "TB/s|GB/s" $L/copy.log | head -3
t sparse_kernels 60 $B/gpu_sparse_kernels_test --gtest_filter='SparseDecode.*'
grep -q FAILED $L/sparse_kernels.log && timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $B/gpu_sparse_kernels_test --gtest_filter='SparseDecode.ResolveAndUpdateMatchCpuRules' > $L/sanitizer.log 2>&1; grep -m8 -E 'Invalid|misaligned|at .*\.cu' $L/sanitizer.log 2>/dev/null
t sparse_model 150 $B/gpu_sparse_model_test
t kernels 60 $B/gpu_kernels_test
t kv_fp8 60 $B/gpu_kv_fp8_test --gtest_filter='GpuKvFp8.Sparse*:GpuKvFp8.Tiny*'
timeout 150 $B/gpu_bench sparse > $L/bench_sparse.log 2>&1; echo "bench sparse rc=$? ($(el) s)"; grep -E "^sparse decode|^full-cache" $L/bench_sparse.log
t attention 100 $B/gpu_attention_test --gtest_filter='GpuAttention.Decode*'
timeout 90 $B/gpu_bench decode-attn > $L/bench_dattn.log 2>&1; echo "bench decode-attn rc=$? ($(el) s)"; grep -E "score update|splits=1 mma shape 0" $L/bench_dattn.log | grep -v FIGURE | head -24
[ $(el) -lt 300 ] && { timeout 120 $B/gpu_bench model > $L/bench_model.log 2>&1; echo "bench model rc=$? ($(el) s)"; grep -E "^FIGURE" $L/bench_model.log | head -30; }
cd $O && tar -czf all.tgz logs; echo "total $(el) s"
