// The FP8 KV cache's write kernel (cache.kv_dtype fp8, docs/kv-fp8.md): RoPE on q and k of the
// fused qkv rows exactly as launch_rope_kv_write (kernels.h; same rotation, q and k rotated in
// place in bf16), then K and V of every token written into its page as e4m3 codes with its KV
// head's fixed scales: code = e4m3(x / s) of the bf16 value (IEEE division, round to nearest even,
// saturating: the CPU's kv_quantize of the same value). Not yet run on a GPU and not yet called by
// the backend (which refuses kv_dtype fp8). Plain C++ header.
//
// Kept apart from kernels.cu while that file's vectorized RoPE work is in flight; the rotation is
// the scalar rope_kv_kernel's, and gpu_kv_fp8_test checks that both give the same q/k bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace strata::cuda {

// p as for launch_rope_kv_write (p.kv_pool and p.vec unused); pool8: page p at
// pool8 + p * p.page_elems (1 byte per element); scales: this layer's [kv_heads][2] (K, V).
void launch_rope_kv_write_fp8(const RopeKvParams& p, std::uint8_t* pool8, const float* scales,
                              cudaStream_t s);

}  // namespace strata::cuda
