// The one place where runtime shapes become template parameters. Only head_dim 64 and 128
// are compiled: every extra value multiplies nvcc time and binary size, and the Llama-3
// family uses 128 (64 for the small test presets). Anything else fails loudly with the value
// and what is supported. Activations are bf16; the KV pool bf16 or, with cache.kv_dtype fp8,
// e4m3 codes (check_kv_cache).
#pragma once

#include <cstdlib>
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
// wired (e4m3 RoPE + K/V write, the decode kernels and the FA2 prefill kernel over e4m3 pages)
// and passed on the H200. Sparse layers: the cuda/sparse/ kernels read and move e4m3 pages too
// (SnapKV scoring and the score update read the codes with the fixed scales; compaction,
// shrink and the scored ring's resolve copy codes as they are; docs/kv-fp8.md "Sparse
// layers"), but they have not run on a GPU yet, so they are refused unless the environment
// variable STRATA_KV_FP8_SPARSE=1 enables them (kv_fp8_sparse_enabled). Still missing, refused
// here before any device work rather than read codes as bf16:
//   - sparse layers without STRATA_KV_FP8_SPARSE=1: sparsity.enabled;
//   - per-request profiles (sparsity.request_override other than off: a request's
//     kv_sparsity may make layers sparse even on a full-cache server), whatever the variable;
//   - tensor parallelism (backend.tp_size > 1): the ranks' slices of the scales are not wired.
// A profile published later through the admin API that enables sparsity is refused by the
// engine (BackendInfo::sparse_refusal = kv_sparse_refusal); a plan that still carries a sparse
// layer is refused per step as well (CudaBackendImpl::check_kv_plan), both unless the variable
// is set.
// Arguments: cache.kv_dtype, sparsity.enabled, whether requests may set kv_sparsity
// (sparsity.request_override != off), backend.tp_size (plain values: .cu files include this
// header, not runtime/config.h).

inline constexpr const char* kKvFp8SparseEnv = "STRATA_KV_FP8_SPARSE";

// STRATA_KV_FP8_SPARSE=1: run sparse layers on e4m3 pages (kernels written, not validated on
// a GPU yet). Read at every check (tests set and unset it).
inline bool kv_fp8_sparse_enabled() {
  const char* v = std::getenv(kKvFp8SparseEnv);
  return v && std::string(v) == "1";
}

// Why sparse layers on e4m3 pages are refused (shared by the checks below).
inline std::string kv_fp8_sparse_why() {
  return "the cuda/sparse/ kernels (scored resolve/update, SnapKV scoring, compaction, shrink) "
         "read e4m3 pages but are not validated on a GPU yet (set " +
         std::string(kKvFp8SparseEnv) + "=1 to run them)";
}

// Why sparse layers cannot run with this KV dtype (empty when they can): BackendInfo's
// sparse_refusal, so a profile published later through the admin API is refused up front.
inline std::string kv_sparse_refusal(KvDtype dtype) {
  if (dtype == KvDtype::kBf16 || kv_fp8_sparse_enabled()) return {};
  return "sparse layers on the CUDA backend with cache.kv_dtype fp8: " + kv_fp8_sparse_why();
}

inline void check_kv_dtype(KvDtype dtype, bool sparsity_enabled, bool request_sparsity,
                           int tp_size) {
  if (dtype == KvDtype::kBf16) return;
  std::string missing;
  auto add = [&](const std::string& m) { missing += (missing.empty() ? "" : "; ") + m; };
  if (sparsity_enabled && !kv_fp8_sparse_enabled())
    add("sparse layers (sparsity.enabled): " + kv_fp8_sparse_why());
  if (request_sparsity)
    add("per-request kv_sparsity (set sparsity.request_override: off): a request's sparse "
        "layers would need the cuda/sparse/ kernels on e4m3 pages, which the CUDA backend does "
        "not run for per-request profiles");
  if (tp_size != 1)
    add("tensor parallelism (backend.tp_size " + std::to_string(tp_size) +
        "): the ranks' slices of the KV scales are not wired yet");
  if (!missing.empty())
    throw ConfigError("cache.kv_dtype",
                      "fp8 on the CUDA backend runs full-cache layers at tp_size 1 (sparse "
                      "layers with " +
                          std::string(kKvFp8SparseEnv) + "=1); refused: " + missing +
                          " (the CPU backend runs them: backend.kind: cpu)");
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
