// Device helpers shared by the sparsity kernels (cuda/sparse/*.cu) and the RoPE + K/V write
// (cuda/rope_kv.cuh, cuda/kernels.cu), which can run the `scored` layers' ring resolve itself.
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
// The arithmetic is spelled with the rounding intrinsics, which nvcc never contracts into an
// FMA: the update kernel and the attention kernel that apply this rule must give the same bits,
// and a contraction the compiler chooses per call site does not (the fifteenth session's H100
// run: the in-kernel update differed from the update kernel in the last bit of some scores).
__device__ __forceinline__ float updated_score(const DecodeUpdateRow& r, int j, float old,
                                               float prob) {
  return j == r.new_slot ? prob
                         : __fadd_rn(__fmul_rn(1.0f - r.lambda, old), __fmul_rn(r.lambda, prob));
}
// One head's term of a slot's group probability, exp(logit - lse), added to the sum in head order.
__device__ __forceinline__ float add_head_prob(float sum, float logit, float lse) {
  return __fadd_rn(sum, expf(__fsub_rn(logit, lse)));
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

// Where a decode ring resolve reads and writes: the layer's score and position pools (positions
// may be null), the flat page list DecodeSeq::table indexes, and the K/V pool (bf16 `pool`, or
// e4m3 codes in `pool8` when set).
struct ResolveView {
  float* scores = nullptr;
  std::int32_t* positions = nullptr;
  const std::int32_t* pages = nullptr;
  __nv_bfloat16* pool = nullptr;
  std::uint8_t* pool8 = nullptr;
  std::size_t page_elems = 0;
  int kv_heads = 0, head_dim = 0;
};

// The ring resolve of one (sequence, KV head), by the 32 lanes of one warp (launch_scored_resolve's
// rule; sparse_kernels.h): when a `scored` row's ring is full, the token in its oldest slot
// (C - r + ring_pos, which the new token overwrites) replaces the lowest-scored slot of
// [sinks, C - r) (the lowest slot on ties) if its score is strictly higher, taking its score,
// position, K and V there; else it is dropped. The caller orders this before the new token's
// K/V store (a block barrier). head_dim % 8 == 0 (bf16) or % 16 == 0 (codes).
__device__ inline void resolve_ring_head(const ResolveView& p, const DecodeSeq& s, int g,
                                         int lane) {
  if (s.policy != kPolicyScored || !ring_full(s)) return;
  const int lo = s.sinks, hi = s.capacity - s.ring;  // unprotected selected slots
  if (hi <= lo) return;                              // never for a valid rule
  const std::int32_t* table = p.pages + s.table;
  const int oldest = s.capacity - s.ring + s.ring_pos;
  std::uint64_t best = ~0ull;  // argmin (score, then slot) as a 64-bit minimum
  for (int j = lo + lane; j < hi; j += 32) {
    const float v = p.scores[score_elem(table, p.kv_heads, g, j)];
    const std::uint64_t key =
        (static_cast<std::uint64_t>(ordered_bits(v)) << 32) | static_cast<std::uint32_t>(j);
    best = key < best ? key : best;
  }
  for (int o = 16; o > 0; o /= 2) {
    const std::uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other < best ? other : best;
  }
  const int victim = static_cast<int>(best & 0xFFFFFFFFu);  // the same in every lane
  const std::size_t sv = score_elem(table, p.kv_heads, g, victim);
  const std::size_t so = score_elem(table, p.kv_heads, g, oldest);
  const float low = p.scores[sv], leaver = p.scores[so];
  if (!(leaver > low)) return;  // uniform over the warp
  __syncwarp();                 // every lane has read scores[sv] before lane 0 writes it
  if (lane == 0) {
    p.scores[sv] = leaver;
    if (p.positions) p.positions[sv] = p.positions[so];
  }
  for (int part = 0; part < 2; ++part) {
    const bool v = part == 1;
    const std::size_t to = kv_elem(table, p.page_elems, p.kv_heads, p.head_dim, g, victim, v);
    const std::size_t from = kv_elem(table, p.page_elems, p.kv_heads, p.head_dim, g, oldest, v);
    if (p.pool8)  // FP8 KV: the leaver's codes as they are (fixed scales)
      copy_row8(p.pool8 + to, p.pool8 + from, p.head_dim, lane, 32);
    else
      copy_row(p.pool + to, p.pool + from, p.head_dim, lane, 32);
  }
}

// Unique selection key: higher score first, then the lower index.
__device__ __forceinline__ std::uint64_t select_key(float score, int index) {
  return (static_cast<std::uint64_t>(ordered_bits(score)) << 32) |
         static_cast<std::uint64_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(index));
}

}  // namespace strata::cuda::sparse::detail
