// The one place where runtime shapes become template parameters. Only head_dim 64 and 128
// are compiled: every extra value multiplies nvcc time and binary size, and the Llama-3
// family uses 128 (64 for the small test presets). Anything else fails loudly with the value
// and what is supported. Activations are bf16; the KV pool bf16 or, with cache.kv_dtype fp8,
// e4m3 codes (check_kv_cache).
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

// cache.kv_dtype fp8 (issue 21, docs/kv-fp8.md) on the CUDA backend: every kernel that reads or
// moves K/V runs on e4m3 pages (the e4m3 RoPE + K/V write, the decode kernels, the FA2 prefill
// kernel, and the cuda/sparse/ kernels: SnapKV scoring and the score update read the codes with
// the fixed scales; compaction, shrink and the scored ring's resolve copy codes as they are),
// full-cache and sparse layers alike, server profiles and per-request ones (all passed on the
// H200 on 2026-12-02, ninth session). Still missing, refused here before any device work:
//   - tensor parallelism (backend.tp_size > 1): the ranks' slices of the scales are not wired.
// Arguments: cache.kv_dtype, backend.tp_size (plain values: .cu files include this header, not
// runtime/config.h).
inline void check_kv_dtype(KvDtype dtype, int tp_size) {
  if (dtype == KvDtype::kBf16 || tp_size == 1) return;
  throw ConfigError("cache.kv_dtype",
                    "fp8 on the CUDA backend runs at tp_size 1; refused: tensor parallelism "
                    "(backend.tp_size " +
                        std::to_string(tp_size) +
                        "): the ranks' slices of the KV scales are not wired yet (the CPU "
                        "backend runs it: backend.kind: cpu)");
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
