// The one place where runtime shapes become template parameters. Only head_dim 64 and 128
// are compiled: every extra value multiplies nvcc time and binary size, and the Llama-3
// family uses 128 (64 for the small test presets). Anything else fails loudly with the value
// and what is supported. KV/activation storage is bf16 only (KvLayout::elem_bytes == 2).
#pragma once

#include <string>

#include "runtime/error.h"
#include "runtime/kv_layout.h"

namespace strata::cuda {

inline constexpr int kSupportedHeadDims[] = {64, 128};

inline bool head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

inline void check_head_dim(int head_dim, const char* where) {
  if (!head_dim_supported(head_dim))
    throw ConfigError("head_dim", std::string(where) + ": head_dim " + std::to_string(head_dim) +
                                      " is not supported by the CUDA kernels (supported: 64, 128)");
}

inline void check_elem_bytes(int elem_bytes, const char* where) {
  if (elem_bytes != 2)
    throw ConfigError("dtype", std::string(where) + ": element size " + std::to_string(elem_bytes) +
                                   " bytes is not supported by the CUDA kernels (supported: bf16)");
}

// cache.kv_dtype fp8 (issue 21, docs/kv-fp8.md) is implemented on the CPU backend only so far:
// the CUDA kernels that write and read K/V (RoPE + K/V write, decode attention full and sparse
// with the scored update, prefill attention over paged prior context, SnapKV scoring,
// compaction, shrink) are bf16 only, so the backend refuses rather than read codes as bf16.
inline void check_kv_dtype(KvDtype dtype) {
  if (dtype != KvDtype::kBf16)
    throw ConfigError(
        "cache.kv_dtype",
        "fp8 is not supported by the CUDA backend yet (missing: e4m3 quantization in "
        "the RoPE + K/V write kernel; e4m3 reads in decode attention (full and sparse, "
        "scored update), prefill attention over paged prior context, SnapKV scoring, "
        "compaction and shrink); the CPU backend runs it (backend.kind: cpu)");
}

}  // namespace strata::cuda

// Usage: STRATA_DISPATCH_HEAD_DIM(hd, "decode_attention", HD, { launch<HD>(...); });
#define STRATA_DISPATCH_HEAD_DIM(value, where, NAME, ...) \
  do {                                                    \
    switch (value) {                                      \
      case 64: {                                          \
        constexpr int NAME = 64;                          \
        __VA_ARGS__                                       \
      } break;                                            \
      case 128: {                                         \
        constexpr int NAME = 128;                         \
        __VA_ARGS__                                       \
      } break;                                            \
      default:                                            \
        ::strata::cuda::check_head_dim(value, where);     \
    }                                                     \
  } while (0)
