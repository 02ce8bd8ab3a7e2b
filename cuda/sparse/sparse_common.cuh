// Device helpers shared by the sparsity kernels (cuda/sparse/*.cu only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/sparse/sparse_meta.h"
#include "runtime/kv_layout.h"

namespace strata::cuda::sparse::detail {

inline constexpr int kPolicyWindow = 1;
inline constexpr int kPolicySnapKv = 2;
inline constexpr int kPolicyScored = 3;
inline constexpr int kPoolMax = 0;

// A decode row's ring is full: the new token overwrites the oldest ring slot.
__device__ __forceinline__ bool ring_full(const DecodeSeq& s) {
  return s.ring > 0 && s.valid == s.capacity;
}

// The decode score update's rule (launch_scored_update; the CPU backend's), in one place for
// the update kernels and the decode attention kernel that applies it itself: the slots the row
// attends this step, the new token's slot, and the score average's step 1/alpha. The new slot
// starts at the group's probability, every other slot moves by 1/alpha towards it.
struct DecodeUpdateRow {
  int attended = 0, new_slot = 0;
  float lambda = 0.0f;
};
__device__ __forceinline__ DecodeUpdateRow decode_update_row(const DecodeSeq& s) {
  const bool full = ring_full(s);
  return {full ? s.capacity : s.valid + 1, full ? s.capacity - s.ring + s.ring_pos : s.valid,
          1.0f / static_cast<float>(s.window)};
}
__device__ __forceinline__ float updated_score(const DecodeUpdateRow& r, int j, float old,
                                               float prob) {
  return j == r.new_slot ? prob : (1.0f - r.lambda) * old + r.lambda * prob;
}

// Element offset of the K (v == false) or V row of (head, slot) in a paged layer.
__device__ __forceinline__ std::size_t kv_elem(const std::int32_t* table, std::size_t page_elems,
                                               int kv_heads, int head_dim, int head, int slot,
                                               bool v) {
  const std::size_t page = static_cast<std::size_t>(table[slot / kBlockSize]);
  const std::size_t head_stride = static_cast<std::size_t>(kBlockSize) * head_dim;
  std::size_t off = page * page_elems + head * head_stride +
                    static_cast<std::size_t>(slot % kBlockSize) * head_dim;
  if (v) off += static_cast<std::size_t>(kv_heads) * head_stride;
  return off;
}

__device__ __forceinline__ std::size_t score_elem(const std::int32_t* table, int kv_heads, int head,
                                                  int slot) {
  return static_cast<std::size_t>(table[slot / kBlockSize]) * kv_heads * kBlockSize +
         static_cast<std::size_t>(head) * kBlockSize + slot % kBlockSize;
}

// Copies `n` bf16 (n % 8 == 0, both 16-byte aligned) with the threads [lane0, lane0 + width).
__device__ __forceinline__ void copy_row(__nv_bfloat16* dst, const __nv_bfloat16* src, int n,
                                         int lane, int width) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (int i = lane; i < n / 8; i += width) d[i] = s[i];
}

// Copies `n` e4m3 codes (n % 16 == 0, both 16-byte aligned) with the threads
// [lane0, lane0 + width): an FP8 KV cache's codes move as they are (fixed per-(layer, KV head)
// scales: no dequantization, no requantization; docs/kv-fp8.md).
__device__ __forceinline__ void copy_row8(std::uint8_t* dst, const std::uint8_t* src, int n,
                                          int lane, int width) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (int i = lane; i < n / 16; i += width) d[i] = s[i];
}

// One e4m3 code to its value (exact; runtime/fp8.h's e4m3_to_float), unscaled.
__device__ __forceinline__ float e4m3_value(std::uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

// Order-preserving map of a float to uint32 (larger float -> larger integer).
__device__ __forceinline__ std::uint32_t ordered_bits(float f) {
  const std::uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Unique selection key: higher score first, then the lower index.
__device__ __forceinline__ std::uint64_t select_key(float score, int index) {
  return (static_cast<std::uint64_t>(ordered_bits(score)) << 32) |
         static_cast<std::uint64_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(index));
}

}  // namespace strata::cuda::sparse::detail
