// The scalar RoPE + K/V write of one token row, shared by the bf16 kernel (cuda/kernels.cu
// rope_kv_kernel) and the e4m3 one (cuda/kv_fp8.cu): one arithmetic, two stores. One block per
// token row.
#pragma once

#include <string>

#include "cuda/kernels.h"
#include "cuda/sparse/sparse_common.cuh"
#include "runtime/error.h"

namespace strata::cuda {

// The launchers' check of RopeKvParams::resolve (its copies move 16-byte chunks).
inline void check_rope_resolve(const RopeKvParams& p, const char* launcher) {
  if (p.resolve.seqs && p.head_dim % 16 != 0)
    throw InternalError(std::string(launcher) + ": the ring resolve needs head_dim % 16 == 0");
}

// (cos, sin) of position pos's angle i: RopeKvParams::cos_sin when it holds pos, else the fp64
// sincos it was built from (launch_rope_table), rounded to fp32 — the same bits either way.
// The one expression of RoPE's angle: fp64 sincos of pos * inv_freq, rounded to fp32. The table
// (launch_rope_table) is filled with it, so a lookup and a computation give the same bits.
__device__ inline float2 rope_angle_cos_sin(int pos, double inv_freq) {
  double sn, cs;
  sincos(static_cast<double>(pos) * inv_freq, &sn, &cs);
  return make_float2(static_cast<float>(cs), static_cast<float>(sn));
}

__device__ inline float2 rope_cos_sin(const RopeKvParams& p, int pos, int i) {
  if (p.cos_sin != nullptr && pos < p.table_positions)
    return p.cos_sin[static_cast<long long>(pos) * (p.head_dim / 2) + i];
  return rope_angle_cos_sin(pos, p.inv_freq[i]);
}

// RopeKvParams::resolve of decode row t (one warp per KV head), before the row's K/V store; the
// caller's block barrier between the two orders the leaver's reads before the overwrite. pool8:
// the e4m3 pool of launch_rope_kv_write_fp8, else null (p.kv_pool). Rows >= num_slot_rows and
// launches without `resolve` do nothing.
__device__ inline void rope_resolve_row(const RopeKvParams& p, int t, std::uint8_t* pool8) {
  if (p.resolve.seqs == nullptr || t >= p.num_slot_rows) return;
  const sparse::detail::ResolveView view{p.resolve.scores,
                                         p.resolve.positions,
                                         p.resolve.pages,
                                         p.kv_pool,
                                         pool8,
                                         static_cast<std::size_t>(p.page_elems),
                                         p.kv_heads,
                                         p.head_dim};
  const sparse::DecodeSeq& s = p.resolve.seqs[t];
  for (int g = threadIdx.x / 32; g < p.kv_heads; g += blockDim.x / 32)
    sparse::detail::resolve_ring_head(view, s, g, threadIdx.x % 32);
}

// Rotates row t's q and k heads in place (pair (i, i + half) of each head), then calls
// store(page_base, off, part, g, k, v) for each of the kv_heads * head_dim K and V values of the
// row's slot: the page starts at page_base (elements), K at page_base + off, V at
// page_base + part + off, g is the KV head. Rows of no sequence (seq_of < 0) do nothing. With
// p.resolve, a decode row's ring resolve first (rope_resolve_row; pool8 as there).
template <typename Store>
__device__ void rope_kv_row(const RopeKvParams& p, int t, Store store,
                            std::uint8_t* pool8 = nullptr) {
  const int seq = p.seq_of[t];
  if (seq < 0) return;
  rope_resolve_row(p, t, pool8);  // reads and writes only the pools: beside the rotation
  const int half = p.head_dim / 2;
  const int row_elems = (p.heads + 2 * p.kv_heads) * p.head_dim;
  bf16* row = p.qkv + static_cast<long long>(t) * row_elems;
  const int pos = p.positions[t];
  const int rot_heads = p.heads + p.kv_heads;
  for (int idx = threadIdx.x; idx < rot_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    bf16* v = row + h * p.head_dim;
    const float2 r = rope_cos_sin(p, pos, i);
    const float c = r.x, s = r.y;
    const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
    v[i] = __float2bfloat16_rn(a * c - b * s);
    v[i + half] = __float2bfloat16_rn(b * c + a * s);
  }
  __syncthreads();
  // K (rotated) and V into the page of this position (layout: kv_layout.h).
  const int kv_slot = (p.slots != nullptr && t < p.num_slot_rows) ? p.slots[t] : pos;
  const int page = p.block_table[static_cast<long long>(seq) * p.table_stride + kv_slot / 16];
  const int slot = kv_slot % 16;
  const long long part = p.page_elems / 2;
  const bf16* k = row + p.heads * p.head_dim;
  const bf16* v = k + p.kv_heads * p.head_dim;
  for (int idx = threadIdx.x; idx < p.kv_heads * p.head_dim; idx += blockDim.x) {
    const int g = idx / p.head_dim, d = idx % p.head_dim;
    const long long off = (static_cast<long long>(g) * 16 + slot) * p.head_dim + d;
    store(static_cast<long long>(page) * p.page_elems, off, part, g, k[idx], v[idx]);
  }
}

}  // namespace strata::cuda
