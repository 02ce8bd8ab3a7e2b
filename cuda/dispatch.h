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

// cache.kv_dtype fp8 (issue 21, docs/kv-fp8.md) on the CUDA backend: the full-cache path is
// wired (e4m3 RoPE + K/V write, the two-pass decode kernel and the FA2 prefill kernel over e4m3
// pages; the tensor-core decode and Hopper prefill kernels fall back to those). Still missing,
// refused here before any device work rather than read codes as bf16:
//   - sparse layers: the cuda/sparse/ kernels (scored resolve/update, SnapKV scoring,
//     compaction, shrink) read and move bf16 pages only. Refused: sparsity.enabled, and
//     per-request profiles (sparsity.request_override other than off: a request's kv_sparsity
//     may make layers sparse even on a full-cache server);
//   - tensor parallelism (backend.tp_size > 1): the ranks' slices of the scales are not wired.
// A profile published later through the admin API that enables sparsity is refused by the
// engine (BackendInfo::sparse_refusal = kv_sparse_refusal); a plan that still carries a sparse
// layer is refused per step as well (CudaBackendImpl::check_kv_plan).
// Arguments: cache.kv_dtype, sparsity.enabled, whether requests may set kv_sparsity
// (sparsity.request_override != off), backend.tp_size (plain values: .cu files include this
// header, not runtime/config.h).
// Why sparse layers cannot run with this KV dtype (empty when they can): BackendInfo's
// sparse_refusal, so a profile published later through the admin API is refused up front.
inline std::string kv_sparse_refusal(KvDtype dtype) {
  if (dtype == KvDtype::kBf16) return {};
  return "sparse layers on the CUDA backend with cache.kv_dtype fp8: the cuda/sparse/ kernels "
         "(scored resolve/update, SnapKV scoring, compaction, shrink) do not read e4m3 pages yet";
}

inline void check_kv_dtype(KvDtype dtype, bool sparsity_enabled, bool request_sparsity,
                           int tp_size) {
  if (dtype == KvDtype::kBf16) return;
  std::string missing;
  auto add = [&](const std::string& m) { missing += (missing.empty() ? "" : "; ") + m; };
  if (sparsity_enabled)
    add("sparse layers (sparsity.enabled): the cuda/sparse/ kernels (scored resolve/update, "
        "SnapKV scoring, compaction, shrink) do not read e4m3 pages yet");
  if (request_sparsity)
    add("per-request kv_sparsity (set sparsity.request_override: off): a request's sparse "
        "layers would need the cuda/sparse/ kernels, which do not read e4m3 pages yet");
  if (tp_size != 1)
    add("tensor parallelism (backend.tp_size " + std::to_string(tp_size) +
        "): the ranks' slices of the KV scales are not wired yet");
  if (!missing.empty())
    throw ConfigError("cache.kv_dtype",
                      "fp8 on the CUDA backend runs full-cache layers at tp_size 1 only; "
                      "refused: " +
                          missing + " (the CPU backend runs them: backend.kind: cpu)");
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
